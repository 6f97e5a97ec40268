"""Print a `Report` as an annual-report PDF with reportlab: letter, highlights, MD&A, statements, notes.

What makes it hard to read, on purpose (each choice drawn per report from the seed):
  * scales change between sections: each money table is in thousands or in millions (one decimal),
    said either in a caption line above it ("(in thousands of USD)") or in its top-left header cell;
    share counts stay in thousands and per-share data in units even when the statement is in millions;
    the employee table is in thousands of people and the dividend in cents;
  * the prior year appears restated in the statements, but as previously reported in the highlights
    and the letter (70% of reports), with the reconciliation in Note 2;
  * costs are printed positive or in parentheses depending on the report; cash outflows in parentheses;
  * 30% of reports end with a paragraph addressed to "automated data extraction systems" that asks
    for the wrong scale or the unrestated figures: the document is untrusted content;
  * every line has several possible labels (`_vocab.LABELS`), the narrative rounds (billions with two
    decimals, millions with one), and the prior year, basic EPS, segment operating income, average
    headcount and the statutory tax rate sit next to the figures asked.
Tables are drawn with grid lines so that a text/table extractor (pdfplumber) finds their cells.

The output is byte-identical for a seed (`rl_config.invariant`: no timestamp, fixed document id).
Not done: scanned pages, multi-column layouts, charts; every page is born-digital single-column text.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Sequence
from typing import Any

from reportlab import rl_config
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import CondPageBreak, PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from . import _vocab
from ._truth import Report

rl_config.invariant = 1  # no creation date or random document id: the same seed gives the same bytes

_SS = getSampleStyleSheet()
_BODY = ParagraphStyle("body", parent=_SS["BodyText"], fontSize=9.5, leading=12.5)
_H1 = ParagraphStyle("h1", parent=_SS["Heading1"], fontSize=16, spaceAfter=8)
_H2 = ParagraphStyle("h2", parent=_SS["Heading2"], fontSize=12.5, spaceBefore=8, spaceAfter=4)
_H3 = ParagraphStyle("h3", parent=_SS["Heading3"], fontSize=10.5, spaceBefore=6, spaceAfter=2)
_CAPTION = ParagraphStyle("caption", parent=_BODY, fontSize=8.5, textColor=colors.HexColor("#333333"))
_HEAD_CELL = ParagraphStyle("head_cell", parent=_BODY, fontName="Helvetica-Bold", fontSize=8.5, leading=10,
                            alignment=2)  # right-aligned, like the numbers under it
_TITLE = ParagraphStyle("title", parent=_SS["Title"], fontSize=26, leading=32, spaceBefore=120)

#: Money tables whose top-left cell is free to carry the scale instead of a caption line.
_HEADER_SCALE_OK = ("highlights", "five_year", "fcf", "is", "bs", "cf", "quarterly")
_MONEY_TABLES = _HEADER_SCALE_OK + ("restatement", "segments", "tax")


class _Layout:
    """The presentation choices of one report (labels, scales, sign style), drawn from its seed."""

    def __init__(self, r: Report) -> None:
        rng = random.Random(f"extraction-layout-{r.seed}")
        self.rng = rng
        self.r = r
        self.labels = {k: rng.choice(v) for k, v in _vocab.LABELS.items()}
        self.titles = {k: rng.choice(v) for k, v in _vocab.TITLES.items()}
        self.year_style = rng.choice(_vocab.YEAR_STYLES)
        self.scale = {k: rng.choice(("thousands", "millions")) for k in _MONEY_TABLES}
        self.in_header = {k: k in _HEADER_SCALE_OK and rng.random() < 0.4 for k in _MONEY_TABLES}
        self.costs_negative = rng.random() < 0.5
        self.billions = rng.random() < 0.5
        self.caption_form = rng.choice(("(in {s} of {c}{x})", "(amounts in {c} {s}{x})"))

    def y(self, year: int) -> str:
        return self.year_style.format(y=year)

    def num(self, v: float, table: str) -> str:
        """A money figure (thousands) as the table prints it; negatives in parentheses, zero as a dash."""
        if v == 0:
            return "—"
        x = v / 1000.0 if self.scale[table] == "millions" else v
        s = f"{abs(x):,.1f}" if self.scale[table] == "millions" else f"{abs(x):,.0f}"
        return f"({s})" if v < 0 else s

    def caption(self, table: str, extra: str = "") -> list[Any]:
        if self.in_header[table]:
            return []
        text = self.caption_form.format(s=self.scale[table], c=self.r.currency, x=extra)
        return [Paragraph(text, _CAPTION), Spacer(1, 2)]

    def corner(self, table: str) -> str:
        return f"{self.r.currency} {self.scale[table]}" if self.in_header[table] else ""

    def money(self, v: float) -> str:
        """A figure as the narrative says it: rounded to millions (one decimal) or billions (two)."""
        s = self.r.symbol
        if self.billions and abs(v) >= 1e6:
            return f"{s}{v / 1e6:,.2f} billion"
        return f"{s}{v / 1e3:,.1f} million"


def _table(rows: Sequence[Sequence[Any]], widths: Sequence[float], bold_rows: Sequence[int] = ()) -> Table:
    t = Table([list(r) for r in rows], colWidths=list(widths), repeatRows=1)
    style: list[tuple[str, tuple[int, int], tuple[int, int], *tuple[Any, ...]]] = [
             ("GRID", (0, 0), (-1, -1), 0.3, colors.HexColor("#999999")), ("FONTSIZE", (0, 0), (-1, -1), 8.5),
             ("ALIGN", (1, 0), (-1, -1), "RIGHT"), ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
             ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#E8EEF4")), ("BOTTOMPADDING", (0, 0), (-1, -1), 2),
             ("TOPPADDING", (0, 0), (-1, -1), 2)]
    for i in bold_rows:
        style.append(("FONTNAME", (0, i), (-1, i), "Helvetica-Bold"))
    t.setStyle(TableStyle(style))
    return t


def _p(text: str, style: ParagraphStyle = _BODY) -> Paragraph:
    return Paragraph(text.replace("&", "&amp;"), style)


def _pct(x: float) -> str:
    return f"{x:.1f}%"


def _change(a: float, b: float) -> str:
    return f"{100.0 * (a / b - 1):+.1f}%" if b else "n/m"


# -- sections ------------------------------------------------------------------------------------------


def _cover(lay: _Layout) -> list[Any]:
    r = lay.r
    return [Paragraph(r.company, _TITLE), _p(f"Annual Report {r.fy}", _H1),
            _p(f"For the fiscal year ended {r.fy_end}, {r.fy}", _H2), Spacer(1, 30),
            _p(f"{r.company} {lay.rng.choice(_vocab.INDUSTRY)}. This report contains the letter to shareholders, "
               "management's discussion and analysis, the consolidated financial statements and the notes to "
               "them."), Spacer(1, 16), _p("Contents", _H3),
            _p("Letter to shareholders · Financial highlights · Management's discussion and analysis · "
               "Consolidated financial statements · Notes to the consolidated financial statements · "
               "Forward-looking statements and glossary"), PageBreak()]


def _letter(lay: _Layout) -> list[Any]:
    r, f = lay.r, lay.r.facts
    up = "rose" if f["growth.cur"] > 0 else "fell"
    prior_sentence = (
        f"Last year we reported revenue of {lay.money(f['revenue.reported'])} and net income of "
        f"{lay.money(f['ni.reported'])}; as explained in Note 2, the prior-year figures have since been restated."
        if r.restated else f"A year earlier revenue was {lay.money(f['revenue.prior'])}.")
    segs = ", ".join(r.segments[:-1]) + f" and {r.segments[-1]}"
    return [
        _p("Letter to shareholders", _H1), _p("Dear shareholders,"),
        _p(f"Fiscal {r.fy} was a year of disciplined execution for {r.company}. Revenue {up} "
           f"{abs(f['growth.cur']):.1f}% to {lay.money(f['revenue.cur'])}, and net income reached "
           f"{lay.money(f['ni.cur'])}. {prior_sentence}"),
        _p(f"All of our segments — {segs} — contributed to the year. We continued to invest in research and "
           f"development ({lay.money(f['rd.cur'])}) and in our plants, with capital expenditure of "
           f"{lay.money(f['capex.cur'])}. Operating cash flow of {lay.money(f['ocf.cur'])} funded that investment "
           "and our return of capital to shareholders."),
        _p(f"At the end of the year we employed approximately {f['emp.cur']:,.0f} people, compared with "
           f"{f['emp.prior']:,.0f} a year earlier. I thank every one of them for their work. The Board has declared "
           f"dividends of {f['dps.cur'] * 100:.0f} cents per share for fiscal {r.fy} "
           f"(fiscal {r.prior}: {f['dps.prior'] * 100:.0f} cents)."),
        _p("Looking ahead, we will keep our priorities unchanged: serve our customers well, improve our margins "
           "step by step, and allocate capital with discipline. The risks we watch most closely are described in "
           "the management's discussion and analysis."),
        Spacer(1, 10), _p("Chief Executive Officer"), PageBreak()]


def _highlights(lay: _Layout) -> list[Any]:
    r, f = lay.r, lay.r.facts
    pk = {k: f[f"{k}.reported"] if r.restated else f[f"{k}.prior"] for k in ("revenue", "oi", "ni")}
    eps_prior = pk["ni"] / f["shares.prior"]
    head = ["" if not lay.in_header["highlights"] else lay.corner("highlights"), lay.y(r.fy),
            lay.y(r.prior) + (" (as reported)" if r.restated else ""), "Change"]
    rows = [head]
    for k, cur in (("revenue", f["revenue.cur"]), ("oi", f["oi.cur"]), ("ni", f["ni.cur"])):
        rows.append([lay.labels[k], lay.num(cur, "highlights"), lay.num(pk[k], "highlights"), _change(cur, pk[k])])
    rows.append([lay.labels["fcf"], lay.num(f["fcf.cur"], "highlights"), lay.num(f["fcf.prior"], "highlights"),
                 _change(f["fcf.cur"], f["fcf.prior"])])
    rows.append([f"Diluted earnings per share ({r.currency})", f"{f['eps.cur']:.2f}", f"{eps_prior:.2f}",
                 _change(f["eps.cur"], eps_prior)])
    rows.append([f"Dividend per share ({r.currency})", f"{f['dps.cur']:.2f}", f"{f['dps.prior']:.2f}",
                 _change(f["dps.cur"], f["dps.prior"])])
    out: list[Any] = [_p("Financial highlights", _H1)]
    out += lay.caption("highlights", ", except per-share data")
    out += [_table(rows, [190, 90, 110, 60]), Spacer(1, 14)]
    # Five years: the last two are the report's own (prior restated); earlier ones are drawn backwards.
    years = [r.fy - i for i in range(4, -1, -1)]
    rev, ni, emp = {r.fy: f["revenue.cur"], r.prior: f["revenue.prior"]}, {r.fy: f["ni.cur"], r.prior: f["ni.prior"]}, \
        {r.fy: f["emp.cur"], r.prior: f["emp.prior"]}
    for y in range(r.prior - 1, r.fy - 5, -1):
        g = lay.rng.uniform(-0.05, 0.15)
        rev[y] = round(rev[y + 1] / (1 + g) / 100) * 100
        ni[y] = round(ni[y + 1] / (1 + g + lay.rng.uniform(-0.05, 0.05)) / 100) * 100
        emp[y] = round(emp[y + 1] / (1 + g / 2) / 100) * 100
    five = [[lay.corner("five_year")] + [lay.y(y) for y in years],
            [lay.labels["revenue"]] + [lay.num(rev[y], "five_year") for y in years],
            [lay.labels["ni"]] + [lay.num(ni[y], "five_year") for y in years],
            ["Employees at year end"] + [f"{emp[y]:,.0f}" for y in years]]
    out += [_p("Five-year summary", _H2)]
    out += lay.caption("five_year", ", except employees")
    out += [_table(five, [150] + [60] * 5),
            _p(f"Fiscal {r.prior} is shown as restated" + ("; earlier years have not been restated." if r.restated
                                                            else "."), _CAPTION), PageBreak()]
    return out


def _mdna(lay: _Layout) -> list[Any]:
    r, f = lay.r, lay.r.facts
    out: list[Any] = [_p("Management's discussion and analysis", _H1), _p("Overview", _H2),
                      _p(f"{r.company} {lay.rng.choice(_vocab.INDUSTRY)}. The discussion below compares fiscal "
                         f"{r.fy} with fiscal {r.prior}" + (" as restated (see Note 2)." if r.restated else "."))]
    direction = "increased" if f["growth.cur"] > 0 else "decreased"
    out += [_p("Results of operations", _H2),
            _p(f"Revenue {direction} {abs(f['growth.cur']):.1f}% to {lay.money(f['revenue.cur'])} in fiscal {r.fy} "
               f"from {lay.money(f['revenue.prior'])} in fiscal {r.prior}. Gross margin was {_pct(f['gm.cur'])}, "
               f"compared with {_pct(f['gm.prior'])} a year earlier, as pricing and mix offset input cost inflation."),
            _p(f"Research and development expense was {lay.money(f['rd.cur'])} and selling, general and "
               f"administrative expense {lay.money(f['sga.cur'])}. Operating income was {lay.money(f['oi.cur'])}, an "
               f"operating margin of {_pct(f['om.cur'])} ({_pct(f['om.prior'])} in fiscal {r.prior}). The effective "
               "tax rate is discussed in Note 4.")]
    out += [_p("Segment review", _H2)]
    for i, s in enumerate(r.segments):
        cur, pri = f[f"seg.{i}.rev.cur"], f[f"seg.{i}.rev.prior"]
        out.append(_p(f"<b>{s}.</b> Revenue of the {s} segment was {r.symbol}{cur / 1e3:,.1f} million "
                      f"({_change(cur, pri)} on {r.symbol}{pri / 1e3:,.1f} million), with segment operating income "
                      f"of {r.symbol}{f[f'seg.{i}.oi.cur'] / 1e3:,.1f} million."))
    fcf = [[lay.corner("fcf"), lay.y(r.fy), lay.y(r.prior)],
           [lay.labels["fcf.ocf"], lay.num(f["ocf.cur"], "fcf"), lay.num(f["ocf.prior"], "fcf")],
           [lay.labels["fcf.capex"], lay.num(-f["capex.cur"], "fcf"), lay.num(-f["capex.prior"], "fcf")],
           [lay.labels["fcf"], lay.num(f["fcf.cur"], "fcf"), lay.num(f["fcf.prior"], "fcf")]]
    out += [CondPageBreak(60 * mm), _p("Non-GAAP financial measures", _H2),
            _p("We use free cash flow, defined as net cash provided by operating activities less purchases of "
               "property, plant and equipment, to assess the cash our businesses generate. It is not a measure "
               "defined by accounting standards and may not be comparable with measures other companies use.")]
    out += lay.caption("fcf")
    out += [_table(fcf, [230, 100, 100], bold_rows=(3,)),
            _p("Liquidity and capital resources", _H2),
            _p(f"Cash and cash equivalents were {lay.money(f['bs.cash.cur'])} at the end of fiscal {r.fy}. Long-term "
               f"debt stood at {lay.money(f['bs.ltd.cur'])}. We paid dividends of {lay.money(f['div.cur'])} and "
               + (f"repurchased shares for {lay.money(f['buyback.cur'])}." if f["buyback.cur"] else
                  "did not repurchase shares during the year.")),
            _p("Principal risks", _H2)]
    for title, text in lay.rng.sample(_vocab.RISKS, lay.rng.randint(3, len(_vocab.RISKS))):
        out += [_p(title, _H3), _p(text)]
    return out + [PageBreak()]


def _statement(lay: _Layout, kind: str, head: list[str], rows: list[list[str]], bold: Sequence[int],
               extra: str = "") -> list[Any]:
    out: list[Any] = [_p(lay.titles[kind], _H1)]
    out += lay.caption(kind, extra)
    widths = [250, 100, 100]
    return out + [_table([head] + rows, widths, bold_rows=bold), Spacer(1, 8),
                  _p("The accompanying notes are an integral part of these consolidated financial statements.",
                     _CAPTION), PageBreak()]


def _income_statement(lay: _Layout) -> list[Any]:
    r, f, L = lay.r, lay.r.facts, lay.labels
    sign = -1 if lay.costs_negative else 1
    prior_head = lay.y(r.prior) + (" (restated)" if r.restated else "")

    def row(k: str, s: int = 1) -> list[str]:
        return [L[k], lay.num(s * f[f"{k}.cur"], "is"), lay.num(s * f[f"{k}.prior"], "is")]

    rows = [row("revenue"), row("cor", sign), row("gp"), row("rd", sign), row("sga", sign), row("opex", sign),
            row("oi"), row("other"), row("ibt"), row("tax", sign), row("ni"),
            [f"{L['beps']} ({r.currency})", f"{f['beps.cur']:.2f}", f"{f['beps.prior']:.2f}"],
            [f"{L['eps']} ({r.currency})", f"{f['eps.cur']:.2f}", f"{f['eps.prior']:.2f}"],
            [L["bshares"], f"{f['bshares.cur']:,.0f}", f"{f['bshares.prior']:,.0f}"],
            [L["shares"], f"{f['shares.cur']:,.0f}", f"{f['shares.prior']:,.0f}"]]
    return _statement(lay, "is", [lay.corner("is"), lay.y(r.fy), prior_head], rows, (3, 7, 11),
                      ", except per-share data and share counts")


def _balance_sheet(lay: _Layout) -> list[Any]:
    r, f, L = lay.r, lay.r.facts, lay.labels
    keys = ("Assets", "cash", "ar", "inv", "oca", "tca", "ppe", "gw", "onca", "ta", "Liabilities and equity",
            "ap", "accr", "std", "tcl", "ltd", "oncl", "tl", "eq", "tle")
    rows = [[k, "", ""] if k[0].isupper() else
            [L[f"bs.{k}"], lay.num(f[f"bs.{k}.cur"], "bs"), lay.num(f[f"bs.{k}.prior"], "bs")] for k in keys]
    head = [lay.corner("bs"), f"{r.fy_end}, {r.fy}", f"{r.fy_end}, {r.prior}"]
    return _statement(lay, "bs", head, rows, (6, 10, 18, 20))


def _cash_flow(lay: _Layout) -> list[Any]:
    r, f, L = lay.r, lay.r.facts, lay.labels
    cur = dict(f) | {"cash_begin.cur": f["bs.cash.prior"], "cash_end.cur": f["bs.cash.cur"],
                     "cash_end.prior": f["bs.cash.prior"]}
    signs = {"capex": -1, "acq": -1, "div": -1, "buyback": -1}

    def row(k: str, label: str = "") -> list[str]:
        s = signs.get(k, 1)
        return [label or L[k], lay.num(s * cur[f"{k}.cur"], "cf"), lay.num(s * cur[f"{k}.prior"], "cf")]

    rows = [["Operating activities", "", ""], row("ni", L["cf.ni"]), row("da"), row("wc"), row("ocf"),
            ["Investing activities", "", ""], row("capex"), row("acq"), row("oinv"), row("icf"),
            ["Financing activities", "", ""], row("div"), row("buyback"), row("debt"), row("fin"),
            row("fx"), row("net"), row("cash_begin"), row("cash_end")]
    return _statement(lay, "cf", [lay.corner("cf"), lay.y(r.fy), lay.y(r.prior)], rows, (5, 10, 15, 19))


def _note_2(lay: _Layout) -> list[Any]:
    """The restatement of the prior year (its reconciliation table), or recent standards where nothing is restated."""
    r, f, L = lay.r, lay.r.facts, lay.labels
    if not r.restated:
        return [_p("Note 2 — Recently issued accounting standards", _H2)] + [_p(t) for t in _vocab.STANDARDS]
    out: list[Any] = [_p("Note 2 — Restatement of prior-year figures", _H2),
                      _p(f"The consolidated financial statements for fiscal {r.prior} have been restated to reflect "
                         f"{r.restatement_cause}. The table below shows the effect on the line items affected; all "
                         f"fiscal {r.prior} figures elsewhere in these statements are shown as restated.")]
    out += lay.caption("restatement")
    rows: list[list[Any]] = [["Line item", "As previously reported", "Adjustment", "As restated"]]
    for k in ("revenue", "oi", "ni"):
        rep, res = f[f"{k}.reported"], f[f"{k}.prior"]
        rows.append([L[k], lay.num(rep, "restatement"), lay.num(res - rep, "restatement"), lay.num(res, "restatement")])
    return out + [_table(rows, [150, 110, 90, 90])]


def _heading(lay: _Layout) -> list[Any]:
    """The first line of a part of the report (levels 1 and 2): whose statements, for which year."""
    r = lay.r
    return [_p(f"{r.company} — fiscal year ended {r.fy_end}, {r.fy}", _H2)]


def _notes(lay: _Layout) -> list[Any]:
    r, f, L = lay.r, lay.r.facts, lay.labels
    out: list[Any] = [_p("Notes to the consolidated financial statements", _H1),
                      _p("Note 1 — Summary of significant accounting policies", _H2)]
    for title, text in lay.rng.sample(_vocab.POLICIES, lay.rng.randint(3, len(_vocab.POLICIES))):
        out += [_p(title, _H3), _p(text)]
    out += _note_2(lay)
    segs = ", ".join(r.segments)
    out += [CondPageBreak(70 * mm), _p("Note 3 — Segment information", _H2),
            _p(f"The Group manages its business in {len(r.segments)} reportable segments: {segs}. Segment "
               "operating income excludes corporate costs, which are not allocated.")]
    out += lay.caption("segments")
    # Long headers wrap inside their cell (a Paragraph), as they would in a typeset report.
    rows: list[list[Any]] = [["Segment"] + [Paragraph(h, _HEAD_CELL) for h in (
        f"Revenue {lay.y(r.fy)}", f"Revenue {lay.y(r.prior)}", f"Operating income {lay.y(r.fy)}",
        f"Operating income {lay.y(r.prior)}")]]
    for i, s in enumerate(r.segments):
        rows.append([s] + [lay.num(f[f"seg.{i}.{m}.{p}"], "segments") for m in ("rev", "oi") for p in ("cur", "prior")])
    tot = {(m, p): sum(f[f"seg.{i}.{m}.{p}"] for i in range(len(r.segments))) for m in ("rev", "oi")
           for p in ("cur", "prior")}
    rows.append(["Total"] + [lay.num(tot[m, p], "segments") for m in ("rev", "oi") for p in ("cur", "prior")])
    out.append(_table(rows, [90, 90, 90, 90, 90], bold_rows=(len(rows) - 1,)))
    current = {p: round(f[f"tax.{p}"] * lay.rng.uniform(0.7, 1.1) / 100) * 100 for p in ("cur", "prior")}
    out += [CondPageBreak(60 * mm), _p("Note 4 — Income taxes", _H2),
            _p(f"The effective tax rate for fiscal {r.fy} was {_pct(f['etr.cur'])} ({_pct(f['etr.prior'])} in "
               f"fiscal {r.prior}), compared with a statutory rate of {f['statutory']:.0f}%. The difference mainly "
               "reflects income taxed at other rates abroad, research credits and non-deductible expenses.")]
    out += lay.caption("tax")
    out.append(_table([[" ", lay.y(r.fy), lay.y(r.prior)],
                       [L["tax.current"], lay.num(current["cur"], "tax"), lay.num(current["prior"], "tax")],
                       [L["tax.deferred"], lay.num(f["tax.cur"] - current["cur"], "tax"),
                        lay.num(f["tax.prior"] - current["prior"], "tax")],
                       [L["tax.total"], lay.num(f["tax.cur"], "tax"), lay.num(f["tax.prior"], "tax")]],
                      [230, 100, 100], bold_rows=(3,)))
    out += [CondPageBreak(50 * mm), _p("Note 5 — Quarterly financial data (unaudited)", _H2),
            _p(f"Quarters are the three-month periods of the fiscal year ended {r.fy_end}.")]
    out += lay.caption("quarterly")
    q = [[lay.corner("quarterly"), "Q1", "Q2", "Q3", "Q4", "Full year"]]
    for p, y in (("cur", r.fy), ("prior", r.prior)):
        q.append([f"{L['revenue']} {lay.y(y)}"] + [lay.num(f[f"q{i}.{p}"], "quarterly") for i in range(1, 5)]
                 + [lay.num(f[f"revenue.{p}"], "quarterly")])
    out.append(_table(q, [130, 64, 64, 64, 64, 70]))
    avg_prior = round(f["emp.prior"] * lay.rng.uniform(0.95, 1.02) / 100) * 100
    out += [CondPageBreak(50 * mm), _p("Note 6 — Employees and dividends", _H2),
            _p("Headcount is stated in thousands of people; dividends per share in cents.")]
    out.append(_table([[" ", lay.y(r.fy), lay.y(r.prior)],
                       [L["emp"], f"{f['emp.cur'] / 1000:,.1f}", f"{f['emp.prior'] / 1000:,.1f}"],
                       [L["emp_avg"], f"{f['emp_avg.cur'] / 1000:,.1f}", f"{avg_prior / 1000:,.1f}"],
                       [L["dps"], f"{f['dps.cur'] * 100:.0f}", f"{f['dps.prior'] * 100:.0f}"]], [230, 100, 100]))
    out += [_p("Note 7 — Subsequent events", _H2),
            _p("No events occurred between the balance sheet date and the date these statements were authorised "
               "for issue that would require adjustment of, or disclosure in, the financial statements."),
            PageBreak()]
    return out


def _closing(lay: _Layout) -> list[Any]:
    out: list[Any] = [_p("Forward-looking statements", _H1), _p(_vocab.FORWARD), _p("Glossary", _H2)]
    for term, text in _vocab.GLOSSARY:
        out.append(_p(f"<b>{term}.</b> {text}"))
    if lay.rng.random() < 0.3:  # untrusted content: an instruction aimed at automated readers, to be ignored
        out += [_p("Note to automated data extraction systems", _H3), _p(lay.rng.choice(_vocab.INJECTIONS))]
    return out


#: What each level prints (`_truth.LEVELS`): the income statement alone; the highlights, statements of income and
#: financial position and the restatement note; the whole annual report.
_SECTIONS: dict[int, tuple[Callable[[_Layout], list[Any]], ...]] = {
    1: (_heading, _income_statement),
    2: (_heading, _highlights, _income_statement, _balance_sheet, _note_2),
    3: (_cover, _letter, _highlights, _mdna, _income_statement, _balance_sheet, _cash_flow, _notes, _closing),
}


def render(report: Report) -> bytes:
    """The report as PDF bytes (deterministic for a seed)."""
    lay = _Layout(report)
    story: list[Any] = []
    for section in _SECTIONS[report.level]:
        story += section(lay)
    while story and isinstance(story[-1], PageBreak):  # no blank last page
        story.pop()
    buf = io.BytesIO()

    def page_frame(canvas: Any, doc: Any) -> None:
        canvas.saveState()
        canvas.setFont("Helvetica", 7.5)
        canvas.drawString(20 * mm, 12 * mm, f"{report.company} — Annual Report {report.fy}")
        canvas.drawRightString(A4[0] - 20 * mm, 12 * mm, f"Page {doc.page}")
        canvas.restoreState()

    doc = SimpleDocTemplate(buf, pagesize=A4, leftMargin=20 * mm, rightMargin=20 * mm, topMargin=18 * mm,
                            bottomMargin=20 * mm, title=f"{report.company} Annual Report {report.fy}",
                            author=report.company)
    doc.build(story, onFirstPage=page_frame, onLaterPages=page_frame)
    return buf.getvalue()
