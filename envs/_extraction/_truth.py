"""The ground truth of one financial report, drawn from a seed: the figures, the fields asked, the traps.

A `Report` is everything the document is printed from (`facts`: every number any table or sentence
shows, in thousands of the reporting currency) and everything the verifier grades against: the
fields asked (`specs`, `truth`), the wrong values a careless reader lands on (`decoys`: the other
period, the figure as previously reported, a neighbouring line) and the relations the figures obey
(`relations`: parts that sum to a total, ratios printed in the text).

How the figures are drawn (all money in thousands, as multiples of 100 so that any table may print
them in thousands or in millions with one decimal without losing a digit):
    revenue 0.2-20 bn, growth -12%..+30% (never within 2% of flat), gross margin 25-65%, opex,
    other income (expense) of either sign, tax 12-32%, diluted shares chosen so EPS lands in 0.6-12;
    3-4 segments and 4 quarters that add up to revenue exactly; a balance sheet that balances; a cash
    flow statement whose net change ties the two balance sheets (an FX line absorbs the rest);
    in 70% of reports a restatement of the prior year's revenue, operating and net income by 1.5-5%.
A draw is kept only when every field is told apart from every other field and from its own decoys
by more than 3x its tolerance (else the verifier could not say "that is the FY2023 figure"), and no
field equals a number printed on the cover. Redraws come from the same generator, so the result is
still a pure function of the seed.

Not modelled: multiple currencies in one report, negative equity, net losses (the effective tax
rate would be meaningless), discontinued operations.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["money", "shares", "per_share", "percent", "count"]
RelKind = Literal["sum", "ratio_pct", "growth_pct", "per_share"]

#: Bump when a seed would draw different figures or a different document: it names the cache.
GENERATOR_VERSION = 1

#: The levels of the task, each drawn from the same report (same seed, same figures, same layout), printed and asked
#: in part: 1 = the income statement alone (one page) with 3-6 of its fiscal-year figures; 2 = the highlights (prior
#: year as reported), income statement, balance sheet and restatement note (4-5 pages) with 8-12 fields, a prior-year
#: one among them where the report restates; 3 = the whole report, every field.
LEVELS = (1, 2, 3)
FULL_LEVEL = 3


def check_level(level: object) -> None:
    """A `ValueError` naming the levels there are, for anything else."""
    if level not in LEVELS:
        raise ValueError(f"extraction level must be one of {', '.join(map(str, LEVELS))}, not {level!r}")

#: Placeholder value per kind in the published answer example; no field is ever within 3x tolerance of one.
EXAMPLE: dict[Kind, float] = {"money": 1234.5, "shares": 1234.5, "per_share": 1.23, "percent": 12.3, "count": 1234}

CURRENCIES = (("USD", "$"), ("EUR", "€"), ("GBP", "£"))
FY_ENDS = (("December", 31), ("June", 30), ("September", 30), ("March", 31))

_PREFIX = ("North", "Blue", "Silver", "Granite", "Harbor", "Summit", "Crescent", "Iron", "Meridian", "Alder",
           "Cobalt", "Lumen", "Vantage", "Pioneer", "Sterling", "Orchid", "Falcon", "Aster", "Beacon", "Keystone")
_SUFFIX = ("field", "ridge", "gate", "stone", "bridge", "wood", "point", "crest", "haven", "mark", "line", "vale")
_FORM = ("Holdings", "Group", "Industries", "Corporation", "Systems", "Technologies", "plc", "Inc.", "SE", "Ltd.")
_SEGMENTS = ("Industrial", "Consumer", "Healthcare", "Software", "Services", "Energy", "Logistics", "Materials",
             "Aerospace", "Retail", "Automotive", "Networks", "Water", "Analytics", "Packaging", "Security")
_RESTATEMENT_CAUSES = (
    "the correction of an error in the timing of revenue recognised on multi-year service contracts",
    "the correction of an error in the cut-off of product shipments at the end of the year",
    "the correction of an error in the measurement of customer rebates and volume discounts",
    "the correction of an error in the capitalisation of software development costs",
)


@dataclass(frozen=True)
class FieldSpec:
    """One field of the answer: its JSON key, what it asks, in which unit, and where the report prints it."""

    key: str
    kind: Kind
    description: str
    section: str


@dataclass(frozen=True)
class Decoy:
    """A wrong value a careless reader finds in the report, and what it is."""

    value: float
    category: Literal["period", "restated", "line"]
    why: str


@dataclass(frozen=True)
class Relation:
    """A relation between answer fields: `target` = sum(sign * term), or a ratio the text prints.

    `sum`: target = Σ sign·term. `ratio_pct`: target = 100·a/b. `growth_pct`: target = 100·(a/b − 1).
    `per_share`: target = a/b. `cross_section` when the terms are printed in different sections.
    """

    name: str
    kind: RelKind
    target: str
    terms: tuple[tuple[str, int], ...]
    cross_section: bool


@dataclass(frozen=True)
class Report:
    """Ground truth of one report. `facts` keys look like `revenue.cur`, `bs.cash.prior`, `seg.0.rev.cur`."""

    report_id: str
    seed: int
    level: int
    """Which part of the report is printed and asked (`LEVELS`)."""
    company: str
    currency: str
    symbol: str
    fy: int
    fy_end: str
    segments: tuple[str, ...]
    restated: bool
    restatement_cause: str
    facts: Mapping[str, float]
    specs: tuple[FieldSpec, ...]
    truth: Mapping[str, float]
    decoys: Mapping[str, tuple[Decoy, ...]]
    relations: tuple[Relation, ...]

    @property
    def prior(self) -> int:
        return self.fy - 1

    def spec(self, key: str) -> FieldSpec:
        return next(s for s in self.specs if s.key == key)


def tolerance(kind: Kind, truth: float) -> float:
    """How far an answer may be from the truth and still count (absolute, in the field's unit).

    Money and shares: 0.05% (a figure read from a narrative rounded to 0.1 million passes; a restated
    or prior-year figure, >= 1.5% away, does not). Percentages: 0.06 points (the text prints one
    decimal). Per-share: 0.006 (two decimals). Counts: exact.
    """
    if kind in ("money", "shares"):
        return max(0.5, 5e-4 * abs(truth))
    if kind == "percent":
        return 0.06
    if kind == "per_share":
        return 0.006
    return 0.5


def close(kind: Kind, truth: float, value: float) -> bool:
    """Does `value` count as `truth` for a field of this kind?"""
    return math.isfinite(value) and abs(value - truth) <= tolerance(kind, truth)


# -- drawing the figures --------------------------------------------------------------------------


def _u(rng: random.Random, lo: float, hi: float, base: float) -> float:
    """base * uniform(lo, hi), as thousands rounded to a multiple of 100."""
    return _r100(base * rng.uniform(lo, hi))


def _r100(x: float) -> float:
    return float(round(x / 100.0) * 100)


def _split(rng: random.Random, total: float, weights: list[float]) -> list[float]:
    """Parts of `total` in proportion to `weights` (multiples of 100, each >= 8%) adding up to it exactly."""
    while True:
        parts = [_r100(total * x / sum(weights)) for x in weights[:-1]]
        parts.append(total - sum(parts))
        if min(parts) >= 0.08 * total:
            return parts
        weights = [max(x, 0.1 * sum(weights)) * rng.uniform(0.9, 1.1) for x in weights]


def _ratios(rng: random.Random) -> dict[str, float]:
    """The company's cost structure, as shares of revenue (the prior year wobbles around it)."""
    return {"cor": 1 - rng.uniform(0.25, 0.65), "rd": rng.uniform(0.02, 0.10), "sga": rng.uniform(0.06, 0.16),
            "other": rng.uniform(0.002, 0.03) * (-1 if rng.random() < 0.6 else 1), "tax": rng.uniform(0.12, 0.32)}


def _income(rng: random.Random, f: dict[str, float], p: str, rev: float, r: Mapping[str, float]) -> None:
    def w(k: str) -> float:  # this year's ratio: the company's, moved by up to +-8% of itself
        return r[k] * rng.uniform(0.92, 1.08) if p == "prior" else r[k]

    f[f"revenue.{p}"] = rev
    f[f"cor.{p}"] = _r100(rev * min(w("cor"), 0.8))
    f[f"gp.{p}"] = rev - f[f"cor.{p}"]
    f[f"rd.{p}"] = _r100(rev * w("rd"))
    f[f"sga.{p}"] = _r100(rev * w("sga"))
    while f[f"gp.{p}"] - f[f"rd.{p}"] - f[f"sga.{p}"] < 0.06 * rev:  # keep an operating profit
        f[f"sga.{p}"] = _r100(f[f"sga.{p}"] * 0.7)
        f[f"rd.{p}"] = _r100(f[f"rd.{p}"] * 0.8)
    f[f"opex.{p}"] = f[f"rd.{p}"] + f[f"sga.{p}"]
    f[f"oi.{p}"] = f[f"gp.{p}"] - f[f"opex.{p}"]
    other = _r100(rev * r["other"] * rng.uniform(0.5, 1.5))
    f[f"other.{p}"] = other or -100.0
    f[f"ibt.{p}"] = f[f"oi.{p}"] + f[f"other.{p}"]
    f[f"tax.{p}"] = _r100(f[f"ibt.{p}"] * w("tax"))
    f[f"ni.{p}"] = f[f"ibt.{p}"] - f[f"tax.{p}"]


_BS_RATIOS = (("cash", 0.05, 0.25), ("ar", 0.08, 0.20), ("inv", 0.03, 0.15), ("oca", 0.01, 0.05), ("ppe", 0.2, 0.8),
              ("gw", 0.02, 0.4), ("onca", 0.02, 0.1), ("ap", 0.04, 0.12), ("accr", 0.03, 0.08), ("std", 0.01, 0.05),
              ("ltd", 0.08, 0.5), ("oncl", 0.02, 0.08))


def _balance(rng: random.Random, f: dict[str, float], p: str, rev: float, r: Mapping[str, float]) -> None:
    # Balance sheet lines follow revenue; a year earlier each line was within +-15% of that share.
    b = {k: _r100(rev * r[k] * (rng.uniform(0.85, 1.15) if p == "prior" else 1.0)) for k, _, _ in _BS_RATIOS}
    b["tca"] = b["cash"] + b["ar"] + b["inv"] + b["oca"]
    b["ta"] = b["tca"] + b["ppe"] + b["gw"] + b["onca"]
    b["tcl"] = b["ap"] + b["accr"] + b["std"]
    while b["tcl"] + b["ltd"] + b["oncl"] > 0.8 * b["ta"]:
        b["ltd"] = _r100(b["ltd"] * 0.7)
        b["oncl"] = _r100(b["oncl"] * 0.7)
    b["tl"] = b["tcl"] + b["ltd"] + b["oncl"]
    b["eq"] = b["ta"] - b["tl"]
    b["tle"] = b["ta"]
    for k, v in b.items():
        f[f"bs.{k}.{p}"] = v


def _cash_flow(rng: random.Random, f: dict[str, float], p: str, rev: float, shares: float) -> None:
    f[f"da.{p}"] = _r100(f[f"bs.ppe.{p}"] * rng.uniform(0.08, 0.15))
    f[f"wc.{p}"] = _u(rng, -0.03, 0.02, rev)
    f[f"ocf.{p}"] = f[f"ni.{p}"] + f[f"da.{p}"] + f[f"wc.{p}"]
    f[f"capex.{p}"] = _u(rng, 0.02, 0.10, rev)
    f[f"acq.{p}"] = _u(rng, 0.0, 0.08, rev) if rng.random() < 0.4 else 0.0
    f[f"oinv.{p}"] = _u(rng, -0.005, 0.01, rev)
    f[f"icf.{p}"] = -f[f"capex.{p}"] - f[f"acq.{p}"] + f[f"oinv.{p}"]
    dps = round(max(f[f"ni.{p}"] * rng.uniform(0.2, 0.5) / shares, 0.05), 2)
    f[f"dps.{p}"] = dps
    f[f"div.{p}"] = _r100(dps * shares)
    f[f"buyback.{p}"] = _u(rng, 0.0, 0.04, rev) if rng.random() < 0.5 else 0.0
    f[f"debt.{p}"] = _u(rng, -0.04, 0.04, rev)


def _draw(rng: random.Random) -> dict[str, float]:
    f: dict[str, float] = {}
    rev = _r100(rng.uniform(2e5, 2e7))
    while True:
        g = rng.uniform(-0.12, 0.30)
        if abs(g) >= 0.02:
            break
    ratios = _ratios(rng)
    _income(rng, f, "cur", rev, ratios)
    _income(rng, f, "prior", _r100(rev / (1 + g)), ratios)
    eps_target = rng.uniform(0.6, 12.0)
    f["shares.cur"] = float(max(round(f["ni.cur"] / eps_target), 1000))
    f["shares.prior"] = float(round(f["shares.cur"] * rng.uniform(0.95, 1.04)))
    for p in ("cur", "prior"):
        f[f"bshares.{p}"] = float(round(f[f"shares.{p}"] * rng.uniform(0.90, 0.96)))
        f[f"eps.{p}"] = f[f"ni.{p}"] / f[f"shares.{p}"]
        f[f"beps.{p}"] = f[f"ni.{p}"] / f[f"bshares.{p}"]
    bs_ratios = {k: rng.uniform(lo, hi) for k, lo, hi in _BS_RATIOS}
    _balance(rng, f, "cur", rev, bs_ratios)
    _balance(rng, f, "prior", f["revenue.prior"], bs_ratios)
    for p in ("cur", "prior"):
        _cash_flow(rng, f, p, f[f"revenue.{p}"], f[f"shares.{p}"])
    # The cash flow statement ties the balance sheets: an FX line takes what the flows do not explain.
    f["fcf.cur"] = f["ocf.cur"] - f["capex.cur"]
    f["fcf.prior"] = f["ocf.prior"] - f["capex.prior"]
    f["fin.cur"] = -f["div.cur"] - f["buyback.cur"] + f["debt.cur"]
    f["net.cur"] = f["ocf.cur"] + f["icf.cur"] + f["fin.cur"]
    f["fx.cur"] = f["bs.cash.cur"] - f["bs.cash.prior"] - f["net.cur"]
    if abs(f["fx.cur"]) > 0.02 * rev:  # let financing (debt) absorb most of it, as a treasurer would
        f["debt.cur"] += _r100(f["fx.cur"] * 0.9)
        f["fin.cur"] = -f["div.cur"] - f["buyback.cur"] + f["debt.cur"]
        f["net.cur"] = f["ocf.cur"] + f["icf.cur"] + f["fin.cur"]
        f["fx.cur"] = f["bs.cash.cur"] - f["bs.cash.prior"] - f["net.cur"]
    f["fin.prior"] = -f["div.prior"] - f["buyback.prior"] + f["debt.prior"]
    f["net.prior"] = f["ocf.prior"] + f["icf.prior"] + f["fin.prior"]
    f["fx.prior"] = _u(rng, -0.003, 0.003, f["revenue.prior"])
    f["cash_begin.prior"] = f["bs.cash.prior"] - f["net.prior"] - f["fx.prior"]
    if f["cash_begin.prior"] < 0.03 * f["revenue.prior"]:  # the year before ended with cash too: borrow less
        cut = _r100(0.03 * f["revenue.prior"] - f["cash_begin.prior"]) + 100
        f["debt.prior"] -= cut
        f["fin.prior"] -= cut
        f["net.prior"] -= cut
        f["cash_begin.prior"] += cut
    for p in ("cur", "prior"):
        f[f"growth.{p}"] = 0.0
        f[f"gm.{p}"] = 100.0 * f[f"gp.{p}"] / f[f"revenue.{p}"]
        f[f"etr.{p}"] = 100.0 * f[f"tax.{p}"] / f[f"ibt.{p}"]
        f[f"om.{p}"] = 100.0 * f[f"oi.{p}"] / f[f"revenue.{p}"]
    f["growth.cur"] = 100.0 * (f["revenue.cur"] / f["revenue.prior"] - 1)
    f["statutory"] = float(rng.choice((19, 21, 25, 30)))
    emp = float(rng.randint(8, 2000) * 100)
    f["emp.cur"] = emp
    f["emp.prior"] = float(round(emp / (1 + g * rng.uniform(0.3, 0.8)) / 100) * 100)
    f["emp_avg.cur"] = float(round((f["emp.cur"] + f["emp.prior"]) / 200) * 100)
    return f


def _jitter(rng: random.Random, weights: list[float], on: bool) -> list[float]:
    return [w * rng.uniform(0.85, 1.15) for w in weights] if on else list(weights)


def _segments_and_quarters(rng: random.Random, f: dict[str, float], n_seg: int) -> None:
    seg_w = [rng.uniform(0.4, 1.6) for _ in range(n_seg)]
    q_w = [rng.uniform(0.88, 1.12) for _ in range(4)]  # a seasonal pattern the prior year roughly repeats
    for p in ("cur", "prior"):
        moved = p == "prior"  # last year's mix: this year's, each share moved by up to +-15%
        for i, v in enumerate(_split(rng, f[f"revenue.{p}"], _jitter(rng, seg_w, moved))):
            f[f"seg.{i}.rev.{p}"] = v
            f[f"seg.{i}.oi.{p}"] = _r100(v * rng.uniform(0.04, 0.22))
        for q, v in enumerate(_split(rng, f[f"revenue.{p}"], _jitter(rng, q_w, moved)), start=1):
            f[f"q{q}.{p}"] = v


def _restate(rng: random.Random, f: dict[str, float]) -> None:
    """The prior year as previously reported: off from the restated figures by 1.5-5%."""
    for k in ("revenue", "oi", "ni"):
        sign = 1 if rng.random() < 0.6 else -1
        f[f"{k}.reported"] = f[f"{k}.prior"] + sign * _r100(abs(f[f"{k}.prior"]) * rng.uniform(0.015, 0.05))


# -- fields, decoys, relations ---------------------------------------------------------------------


def _slug(name: str) -> str:
    return name.lower().replace(" ", "_")


def _fields(fy: int, cur: str, segs: tuple[str, ...]) -> list[tuple[str, str, Kind, str, str]]:
    """(key, fact, kind, description, section) for every field asked."""
    m = f"{cur} thousands"
    y, p = f"fy{fy}", f"fy{fy - 1}"
    pos, neg = ", positive", "; negative when it is a net expense"
    income = (("revenue", "revenue", "Total revenue", ""), ("cost_of_revenue", "cor", "Cost of revenue (cost of sales)", pos),
              ("gross_profit", "gp", "Gross profit", ""), ("rd_expense", "rd", "Research and development expense", pos),
              ("sga_expense", "sga", "Selling, general and administrative expense", pos),
              ("operating_income", "oi", "Operating income", ""), ("other_income_net", "other", "Other income (expense), net", neg),
              ("income_before_tax", "ibt", "Income before income taxes", ""),
              ("income_tax", "tax", "Income tax expense", pos), ("net_income", "ni", "Net income", ""))
    out: list[tuple[str, str, Kind, str, str]] = [
        (f"{key}_{y}", f"{fact}.cur", "money", f"{what} for fiscal {fy}, {m}{rule}", "income statement")
        for key, fact, what, rule in income]
    out += [
        (f"diluted_eps_{y}", "eps.cur", "per_share", f"Diluted earnings per share for fiscal {fy}, in {cur} per share",
         "income statement"),
        (f"diluted_shares_{y}", "shares.cur", "shares",
         f"Diluted weighted-average shares outstanding for fiscal {fy}, in thousands of shares", "income statement"),
    ]
    out += [(f"{key}_{p}", f"{fact}.prior", "money",
             f"{what} for fiscal {fy - 1}, {m}, as restated where the report restates it", "income statement")
            for key, fact, what, _ in income if fact in ("revenue", "oi", "ni")]
    for i, s in enumerate(segs):
        out.append((f"segment_revenue_{_slug(s)}_{y}", f"seg.{i}.rev.cur", "money",
                    f"Revenue of the {s} segment for fiscal {fy}, {m}", "segment note"))
    for q in range(1, 5):
        out.append((f"revenue_q{q}_{y}", f"q{q}.cur", "money", f"Revenue of the {_ORD[q]} quarter of fiscal {fy}, {m}",
                    "quarterly note"))
    bs = (("cash", "cash", "Cash and cash equivalents"), ("receivables", "ar", "Trade receivables, net"),
          ("inventories", "inv", "Inventories"), ("total_current_assets", "tca", "Total current assets"),
          ("total_assets", "ta", "Total assets"), ("total_current_liabilities", "tcl", "Total current liabilities"),
          ("long_term_debt", "ltd", "Long-term debt (non-current portion)"),
          ("total_liabilities", "tl", "Total liabilities"), ("total_equity", "eq", "Total shareholders' equity"))
    for key, fact, what in bs:
        out.append((f"{key}_end_{y}", f"bs.{fact}.cur", "money", f"{what} at the end of fiscal {fy}, {m}",
                    "balance sheet"))
    out += [
        (f"operating_cash_flow_{y}", "ocf.cur", "money", f"Net cash provided by operating activities, fiscal {fy}, {m}",
         "cash flow statement"),
        (f"capex_{y}", "capex.cur", "money",
         f"Purchases of property, plant and equipment (capital expenditure), fiscal {fy}, {m}, as a positive amount",
         "cash flow statement"),
        (f"investing_cash_flow_{y}", "icf.cur", "money",
         f"Net cash from investing activities, fiscal {fy}, {m}; negative when cash was used", "cash flow statement"),
        (f"dividends_paid_{y}", "div.cur", "money", f"Dividends paid in fiscal {fy}, {m}, as a positive amount",
         "cash flow statement"),
        (f"free_cash_flow_{y}", "fcf.cur", "money", f"Free cash flow for fiscal {fy} as the report defines it, {m}",
         "management's discussion"),
        (f"revenue_growth_pct_{y}", "growth.cur", "percent",
         f"Revenue growth in fiscal {fy} over fiscal {fy - 1} (restated), in percent (8.5 means 8.5%)",
         "management's discussion"),
        (f"gross_margin_pct_{y}", "gm.cur", "percent", f"Gross margin for fiscal {fy}, in percent of revenue",
         "management's discussion"),
        (f"effective_tax_rate_pct_{y}", "etr.cur", "percent", f"Effective tax rate for fiscal {fy}, in percent",
         "income tax note"),
        (f"employees_end_{y}", "emp.cur", "count", f"Number of employees at the end of fiscal {fy} (persons)",
         "other information"),
        (f"dividend_per_share_{y}", "dps.cur", "per_share", f"Dividends declared per share for fiscal {fy}, in {cur}",
         "other information"),
    ]
    return out


_ORD = {1: "first", 2: "second", 3: "third", 4: "fourth"}


def _decoys(fact: str, f: Mapping[str, float], fy: int, restated: bool) -> list[Decoy]:
    out: list[Decoy] = []
    base, _, per = fact.rpartition(".")
    if per in ("cur", "prior"):
        other = "prior" if per == "cur" else "cur"
        oy = fy - 1 if per == "cur" else fy
        if f"{base}.{other}" in f and not base.startswith("growth"):
            what = "balance at the end of" if base.startswith("bs.") else "figure for"
            out.append(Decoy(f[f"{base}.{other}"], "period",
                             f"is the {what} fiscal {oy}; this field asks for fiscal {fy if per == 'cur' else fy - 1}"))
    if fact == "growth.cur" and restated:
        out.append(Decoy(100.0 * (f["revenue.cur"] / f["revenue.reported"] - 1), "restated",
                         f"is the growth over fiscal {fy - 1} revenue as previously reported; this field asks for "
                         "growth over the restated figure"))
    if per == "prior" and restated and f"{base}.reported" in f:
        out.append(Decoy(f[f"{base}.reported"], "restated",
                         "is the figure as previously reported; this field asks for the restated figure "
                         "(see the restatement note)"))
    lines = {"eps.cur": ("beps.cur", "basic earnings per share; this field asks for diluted"),
             "shares.cur": ("bshares.cur", "the basic share count; this field asks for diluted"),
             "emp.cur": ("emp_avg.cur", "the average number of employees; this field asks for the year-end number"),
             "etr.cur": ("statutory", "the statutory tax rate; this field asks for the effective rate"),
             "fcf.cur": ("ocf.cur", "the operating cash flow, before capital expenditure")}
    if fact in lines:
        src, why = lines[fact]
        out.append(Decoy(f[src], "line", f"is {why}"))
    if fact.startswith("seg.") and fact.endswith(".rev.cur"):
        i = fact.split(".")[1]
        out.append(Decoy(f[f"seg.{i}.oi.cur"], "line", "is the segment's operating income; this field asks for its revenue"))
    return out


def _relations(fy: int, segs: tuple[str, ...]) -> tuple[Relation, ...]:
    y, p = f"fy{fy}", f"fy{fy - 1}"
    seg = tuple((f"segment_revenue_{_slug(s)}_{y}", 1) for s in segs)
    return (
        Relation("segment revenues add up to total revenue", "sum", f"revenue_{y}", seg, True),
        Relation("quarterly revenues add up to total revenue", "sum", f"revenue_{y}",
                 tuple((f"revenue_q{q}_{y}", 1) for q in range(1, 5)), True),
        Relation("gross profit = revenue - cost of revenue", "sum", f"gross_profit_{y}",
                 ((f"revenue_{y}", 1), (f"cost_of_revenue_{y}", -1)), False),
        Relation("operating income = gross profit - R&D - SG&A", "sum", f"operating_income_{y}",
                 ((f"gross_profit_{y}", 1), (f"rd_expense_{y}", -1), (f"sga_expense_{y}", -1)), False),
        Relation("income before tax = operating income + other income (expense)", "sum", f"income_before_tax_{y}",
                 ((f"operating_income_{y}", 1), (f"other_income_net_{y}", 1)), False),
        Relation("net income = income before tax - income tax", "sum", f"net_income_{y}",
                 ((f"income_before_tax_{y}", 1), (f"income_tax_{y}", -1)), False),
        Relation("total assets = total liabilities + equity", "sum", f"total_assets_end_{y}",
                 ((f"total_liabilities_end_{y}", 1), (f"total_equity_end_{y}", 1)), False),
        Relation("free cash flow = operating cash flow - capital expenditure", "sum", f"free_cash_flow_{y}",
                 ((f"operating_cash_flow_{y}", 1), (f"capex_{y}", -1)), True),
        Relation("revenue growth matches the two years' revenue", "growth_pct", f"revenue_growth_pct_{y}",
                 ((f"revenue_{y}", 1), (f"revenue_{p}", 1)), True),
        Relation("gross margin = gross profit / revenue", "ratio_pct", f"gross_margin_pct_{y}",
                 ((f"gross_profit_{y}", 1), (f"revenue_{y}", 1)), True),
        Relation("effective tax rate = income tax / income before tax", "ratio_pct", f"effective_tax_rate_pct_{y}",
                 ((f"income_tax_{y}", 1), (f"income_before_tax_{y}", 1)), True),
        Relation("diluted EPS = net income / diluted shares", "per_share", f"diluted_eps_{y}",
                 ((f"net_income_{y}", 1), (f"diluted_shares_{y}", 1)), False),
    )


def _distinct(truth: Mapping[str, float], specs: tuple[FieldSpec, ...], decoys: Mapping[str, tuple[Decoy, ...]],
              cover: tuple[float, ...]) -> bool:
    """Every field is > 3x its tolerance from every other field, from its decoys and from cover numbers."""
    for s in specs:
        t = truth[s.key]
        tol = 3 * tolerance(s.kind, t)
        if t == 0 or any(abs(abs(t) - abs(c)) <= tol for c in cover):
            return False
        others = [truth[o.key] for o in specs if o.key != s.key] + [d.value for d in decoys[s.key]]
        if any(abs(t - v) <= tol for v in others):
            return False
    return True


def _asked(rng: random.Random, level: int, specs: tuple[FieldSpec, ...], fy: int, restated: bool) -> set[str]:
    """The keys a level asks: level 1 3-6 of the fiscal year's income-statement money fields, level 2 8-12 from the
    income statement and balance sheet (a restated prior-year field among them where the report restates), level 3
    all. Drawn from its own stream, so the figures are the same at every level."""
    if level == FULL_LEVEL:
        return {s.key for s in specs}
    y = f"_fy{fy}"
    if level == 1:
        pool = [s.key for s in specs if s.section == "income statement" and s.kind == "money" and s.key.endswith(y)]
        return set(rng.sample(pool, rng.randint(3, 6)))
    pool = [s.key for s in specs if s.section in ("income statement", "balance sheet")]
    prior = [k for k in pool if k.endswith(f"_fy{fy - 1}")]
    first = [rng.choice(prior)] if restated else []
    rest = [k for k in pool if k not in first]
    return set(first + rng.sample(rest, rng.randint(8, 12) - len(first)))


def generate(seed: int, report_id: str, level: int = FULL_LEVEL) -> Report:
    """The report `seed` draws (deterministic: same seed, same report, on every machine), printed and asked at
    `level` (`LEVELS`): the figures do not depend on the level, only which of them the document prints and the
    answer asks."""
    check_level(level)
    rng = random.Random(f"extraction-v{GENERATOR_VERSION}-{seed}")
    company = f"{rng.choice(_PREFIX)}{rng.choice(_SUFFIX)} {rng.choice(_FORM)}"
    currency, symbol = rng.choice(CURRENCIES)
    fy = rng.randint(2016, 2025)
    month, day = rng.choice(FY_ENDS)
    segs = tuple(rng.sample(_SEGMENTS, rng.choice((3, 4))))
    restated = rng.random() < 0.7
    cause = rng.choice(_RESTATEMENT_CAUSES)
    for _attempt in range(200):
        f = _draw(rng)
        _segments_and_quarters(rng, f, len(segs))
        if restated:
            _restate(rng, f)
        rows = _fields(fy, currency, segs)
        specs = tuple(FieldSpec(k, kind, d, sec) for k, _fact, kind, d, sec in rows)
        truth = {k: f[fact] for k, fact, *_ in rows}
        decoys = {k: tuple(_decoys(fact, f, fy, restated)) for k, fact, *_ in rows}
        if _distinct(truth, specs, decoys, cover=(float(fy), float(day), 1.0, *EXAMPLE.values())):
            asked = _asked(random.Random(f"extraction-level{level}-{seed}"), level, specs, fy, restated)
            relations = tuple(r for r in _relations(fy, segs)
                              if r.target in asked and all(k in asked for k, _ in r.terms))
            return Report(report_id=report_id, seed=seed, level=level, company=company, currency=currency,
                          symbol=symbol, fy=fy, fy_end=f"{month} {day}", segments=segs, restated=restated,
                          restatement_cause=cause, facts=f, specs=tuple(s for s in specs if s.key in asked),
                          truth={k: v for k, v in truth.items() if k in asked},
                          decoys={k: v for k, v in decoys.items() if k in asked}, relations=relations)
    raise RuntimeError(f"seed {seed}: no draw told every field apart in 200 attempts (a generator bug)")
