"""An evaluation set for the anonymizer that this project did not generate, in two splits.

    .venv/bin/python bench/anonymize_eval.py [--split dev|holdout] [--misses]

Why: the name/address model is trained on Faker text from `collector/_names_data.py`, and
`bench/anonymize.py`'s own sentences come from Faker too, so both measure how well the model fits
its own generator. A hold-out written by others scored names 0.86 and addresses 0.79 where our
benchmark said 0.88 and 0.92. This set is built from sources the model never sees:

- hand-written cases (`bench/data/pii_dev.txt`, `bench/data/pii_holdout.txt`): chat turns, support
  tickets, e-mails, server and firewall logs, stack traces, code, CSV and SQL rows, configs, in a
  dozen languages, with names and addresses in formats Faker does not produce (titles inside
  signatures, lowercase names in chat, "Flat 3, 14 Rathmines Road Lower, Dublin 6", "ul. Długa 12/4",
  "Av. Insurgentes Sur 1602, Col. ..."), and hard negatives (versions, builds, metrics, prices);
- values from Mimesis (another generator, other name and street lists, other phone formats) in 28
  Latin-script locales, placed in templates written here, not shared with any other generator.

Splits. `dev` (the dev file, Mimesis seed 101, the dev templates) may be looked at while tuning:
its misses are printed with `--misses` and stored in the results. `holdout` (the hold-out file,
seed 202, a disjoint set of templates) is only scored: counts, never examples, so that it stays out
of tuning. Non-Latin scripts (Cyrillic, Greek, CJK, Arabic) are a separate slice, `non_latin`:
the name model works on capitalization and Latin-script gazetteers and is known not to cover them.

Targets (issue 8): every structured type recall >= 0.99, names and addresses >= 0.92, precision
>= 0.95 for every type.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# First on the path even when PYTHONPATH has it: bench/collector.py must not shadow the package.
sys.path.insert(0, str(ROOT))

DATA = Path(__file__).resolve().parent / "data"
STRUCTURED = ("EMAIL", "PHONE", "IPV4", "IPV6", "CREDIT_CARD", "IBAN", "SSN", "DOB", "URL_CREDENTIALS",
              "API_KEY", "JWT", "PRIVATE_KEY", "SECRET")
FREEFORM = ("PERSON", "ADDRESS")
KINDS = STRUCTURED + FREEFORM
TARGET_RECALL, TARGET_FREEFORM_RECALL, TARGET_PRECISION = 0.99, 0.92, 0.95
SEEDS = {"dev": 101, "holdout": 202}

LATIN_LOCALES = ("az", "cs", "da", "de", "de-at", "de-ch", "en", "en-au", "en-ca", "en-gb", "es", "es-mx", "et", "fi",
                 "fr", "hu", "hr", "is", "it", "nl", "nl-be", "no", "pl", "pt", "pt-br", "sk", "sv", "tr")
NON_LATIN_LOCALES = ("ru", "uk", "el", "kk", "ja", "ko", "zh", "ar-eg", "fa")


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int
    sub: str = ""  # gold only: where it came from (locale, format, "hand")


@dataclass(frozen=True)
class Sample:
    text: str
    gold: tuple[Span, ...]


# ---------------------------------------------------------------------------------------------
# Hand-written cases

_MARK = re.compile(r"\[\[([A-Z_0-9]+): (.*?)\]\]", re.S)


def parse_marked(block: str, sub: str = "hand") -> Sample:
    """`"mail [[EMAIL: a@b.org]] now"` -> Sample("mail a@b.org now", (Span("EMAIL", 5, 12),))."""
    text, gold, pos = "", [], 0
    for m in _MARK.finditer(block):
        text += block[pos:m.start()]
        kind, value = m.group(1), m.group(2)
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} in {block[:60]!r}")
        gold.append(Span(kind, len(text), len(text) + len(value), sub))
        text += value
        pos = m.end()
    return Sample(text + block[pos:], tuple(gold))


def load_handwritten(split: str) -> list[Sample]:
    raw = (DATA / f"pii_{split}.txt").read_text(encoding="utf-8")
    blocks = [b.strip("\n") for b in raw.split("\n%%\n")[1:]]  # the first block is the header
    return [parse_marked(b) for b in blocks if b.strip()]


# ---------------------------------------------------------------------------------------------
# Mimesis values in templates written here. Dev and hold-out use disjoint templates.

DEV_TEMPLATES = (
    "hi, this is {PERSON}, my new number is {PHONE}",
    "Ticket {N}: {PERSON} reports the export is empty. Reply to {EMAIL}.",
    "please ship the replacement to {ADDRESS}",
    "{DATE} INFO auth login ok user={EMAIL} src={IPV4}",
    "{N},{PERSON},{EMAIL},{PHONE}",
    '{{"customer": "{PERSON}", "shipping": "{ADDRESS}", "items": {N} }}',
    "Dear {TITLE} {LAST},\n\nyour order {N} will be delivered to {ADDRESS}.\n\nBest,\n{PERSON}",
    "payment_method: card {CREDIT_CARD}, holder {PERSON}",
    "{PERSON} wrote: the VPN drops every hour, my laptop is at {IPV4}",
    "date_of_birth={DOB}&name={PERSON}",
    "Contact: {PERSON} | {PHONE} | {EMAIL}",
    "ssh deploy@{IPV6} -i ~/.ssh/id_ed25519",
    "Moving to {ADDRESS} next month, can you update my profile?",
    "password={SECRET} user={USER}",
    "Meeting notes ({WEEKDAY}): {FIRST} will draft the RFC, {FIRST} reviews it.",
    "Version {VER} deployed to {N} hosts in {CITY}; no incidents.",
    "Order {N} total {PRICE} EUR, {N} items, shipped {WEEKDAY}.",
)
HOLDOUT_TEMPLATES = (
    "my name is {PERSON} and I can't log in since {WEEKDAY}",
    "Support request from {PERSON} <{EMAIL}>: the invoice address should be {ADDRESS}.",
    "Deliver to: {ADDRESS}\nRecipient: {PERSON}\nPhone: {PHONE}",
    "[{DATE}] WARN rate limit exceeded for {IPV4} (user {EMAIL})",
    '{{"name": "{PERSON}", "phone": "{PHONE}", "dob": "{DOB}"}}',
    "{PERSON};{ADDRESS};{PHONE}",
    "Hello {FIRST}, your parcel is waiting at {ADDRESS}. Questions? Call {PHONE}.",
    "Charge {CREDIT_CARD} for the annual plan ({PRICE} EUR)",
    "ask {PERSON} whether {IPV6} is still allowed in the firewall",
    "born {DOB}, lives at {ADDRESS}",
    "Reviewer: {PERSON}\nApprover: {PERSON}",
    "ping {IPV4} && curl http://{IPV4}:8080/health",
    "I changed my e-mail to {EMAIL} and my phone to {PHONE}",
    "client_secret: {SECRET}",
    "Standup: {FIRST} finished the migration, {FIRST} is blocked on review.",
    "Release {VER} built in {N} s on {CITY} runners.",
    "Invoice {N}: {N} units at {PRICE}, due {WEEKDAY}.",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_DOB_FORMATS = ("%Y-%m-%d", "%d.%m.%Y", "%d/%m/%Y", "%B %d, %Y", "%d %B %Y")


class MimesisGen:
    """Samples from `templates` filled with Mimesis values of `locales` (one locale per sample)."""

    def __init__(self, seed: int, templates: tuple[str, ...], locales: tuple[str, ...]) -> None:
        from mimesis import Address, Datetime, Internet, Payment, Person
        from mimesis.locales import Locale

        self.rng = random.Random(seed)
        self.templates, self.locales = templates, locales
        by_value = {loc.value: loc for loc in Locale}
        self.person = {loc: Person(by_value[loc], seed=seed) for loc in locales}
        self.address = {loc: Address(by_value[loc], seed=seed) for loc in locales}
        self.internet, self.payment = Internet(seed=seed), Payment(seed=seed)
        self.dt = Datetime(seed=seed)
        self.en = Person(Locale.EN, seed=seed)

    def _address(self, loc: str) -> str:
        a, r = self.address[loc], self.rng
        street = a.address()
        u = r.random()
        if u < 0.35:
            return street
        if u < 0.7:
            return f"{street}, {a.postal_code()} {a.city()}"
        if u < 0.85:
            return f"{street}, {a.city()} {a.postal_code()}"
        return f"{street}\n{a.postal_code()} {a.city()}"

    def _person(self, loc: str) -> str:
        p, r = self.person[loc], self.rng
        u = r.random()
        if u < 0.6:
            return p.full_name()
        if u < 0.75:
            return f"{p.first_name()} {p.last_name()}"
        if u < 0.85:
            return f"{p.last_name()}, {p.first_name()}"
        return p.full_name().upper() if u < 0.9 else p.first_name()

    def value(self, slot: str, loc: str) -> tuple[str, str | None]:
        """(value, gold kind or None for non-PII filler)."""
        r, p = self.rng, self.person[loc]
        pii: dict[str, Any] = {
            "PERSON": lambda: self._person(loc), "FIRST": p.first_name, "LAST": p.last_name,
            "ADDRESS": lambda: self._address(loc), "EMAIL": p.email, "PHONE": p.phone_number,
            "IPV4": self.internet.ip_v4, "IPV6": self.internet.ip_v6, "CREDIT_CARD": self.payment.credit_card_number,
            "DOB": lambda: self.dt.date(start=1940, end=2005).strftime(r.choice(_DOB_FORMATS)),
            "SECRET": lambda: self.en.password(length=r.randrange(10, 24)),
        }
        filler: dict[str, Any] = {
            "TITLE": lambda: r.choice(("Mr.", "Ms.", "Dr.", "Mrs.")), "USER": self.en.username,
            "CITY": self.address[loc].city, "WEEKDAY": lambda: r.choice(_WEEKDAYS),
            "DATE": lambda: self.dt.datetime(start=2023, end=2024).isoformat(timespec="seconds"),
            "VER": lambda: f"{r.randrange(1, 9)}.{r.randrange(0, 30)}.{r.randrange(0, 40)}",
            "PRICE": lambda: f"{r.randrange(1, 5000)}.{r.randrange(0, 100):02d}",
            "N": lambda: str(r.randrange(1, 10 ** r.randrange(1, 7))),
        }
        if slot in pii:
            return pii[slot](), slot if slot not in ("FIRST", "LAST") else "PERSON"
        return filler[slot](), None

    def sample(self) -> Sample:
        loc = self.rng.choice(self.locales)
        template = self.rng.choice(self.templates).replace("{{", "\0").replace("}}", "\1")
        text, gold = "", []
        for part in re.split(r"(\{[A-Z_0-9]+\})", template):
            if part.startswith("{") and part.endswith("}"):
                value, kind = self.value(part[1:-1], loc)
                if kind:
                    gold.append(Span(kind, len(text), len(text) + len(value), loc))
                text += value
            else:
                text += part.replace("\0", "{").replace("\1", "}")
        return Sample(text, tuple(gold))


def build(split: str, n_generated: int = 600) -> dict[str, list[Sample]]:
    """The split's slices: `hand` (hand-written), `mimesis` (Latin-script locales), `non_latin`."""
    templates = DEV_TEMPLATES if split == "dev" else HOLDOUT_TEMPLATES
    seed = SEEDS[split]
    latin = MimesisGen(seed, templates, LATIN_LOCALES)
    other = MimesisGen(seed + 1, templates, NON_LATIN_LOCALES)
    return {
        "hand": load_handwritten(split),
        "mimesis": [latin.sample() for _ in range(n_generated)],
        "non_latin": [other.sample() for _ in range(n_generated // 4)],
    }


# ---------------------------------------------------------------------------------------------
# Scoring


def score(samples: list[Sample], preds: list[list[Span]], kinds: tuple[str, ...] = KINDS,
          examples: bool = True, freeform_recall: float = TARGET_FREEFORM_RECALL, recall: float = TARGET_RECALL,
          precision: float = TARGET_PRECISION) -> dict[str, Any]:
    """Per type: a prediction is a true positive if it overlaps a gold span of the same type;
    precision = true-positive predictions / predictions; recall = gold spans hit / gold spans;
    `char_recall` = the gold spans' letters and digits covered by any prediction (what is left
    leaks). `examples=False` keeps counts only (the hold-out)."""
    per: dict[str, dict[str, Any]] = {
        k: {"gold": 0, "gold_hit": 0, "pred": 0, "pred_tp": 0, "chars": 0, "chars_covered": 0, "missed": [],
            "false_pos": []} for k in kinds
    }
    by_sub: dict[str, dict[str, list[int]]] = {k: {} for k in kinds}
    fp_clean = 0
    for sample, pred in zip(samples, preds):
        text = sample.text
        for g in sample.gold:
            if g.kind not in per:
                continue
            m = per[g.kind]
            m["gold"] += 1
            counts = by_sub[g.kind].setdefault(g.sub or "-", [0, 0])
            counts[0] += 1
            alnum = [i for i in range(g.start, g.end) if text[i].isalnum()]
            m["chars"] += len(alnum)
            m["chars_covered"] += sum(1 for i in alnum if any(p.start <= i < p.end for p in pred))
            if any(p.kind == g.kind and p.start < g.end and g.start < p.end for p in pred):
                m["gold_hit"] += 1
                counts[1] += 1
            elif examples and len(m["missed"]) < 12:
                m["missed"].append({"span": text[g.start:g.end], "format": g.sub, "text": text})
        for p in pred:
            if p.kind not in per:
                continue
            per[p.kind]["pred"] += 1
            if any(p.kind == g.kind and p.start < g.end and g.start < p.end for g in sample.gold):
                per[p.kind]["pred_tp"] += 1
            else:
                if not sample.gold:
                    fp_clean += 1
                if examples and len(per[p.kind]["false_pos"]) < 12:
                    per[p.kind]["false_pos"].append({"span": text[p.start:p.end], "text": text})
    for k, m in per.items():
        m["recall"] = m["gold_hit"] / m["gold"] if m["gold"] else None
        m["precision"] = m["pred_tp"] / m["pred"] if m["pred"] else None
        m["char_recall"] = m["chars_covered"] / m["chars"] if m["chars"] else None
        if len(by_sub[k]) > 1:
            m["recall_by_format"] = {
                sub: {"gold": g, "recall": round(h / g, 4)} for sub, (g, h) in sorted(by_sub[k].items())
            }
        target = freeform_recall if k in FREEFORM else recall
        m["meets_target"] = (
            m["recall"] is not None and m["recall"] >= target
            and (m["precision"] if m["precision"] is not None else 1.0) >= precision
        )
        if not examples:
            del m["missed"], m["false_pos"]
    return {"per_type": per, "false_positives_on_clean_samples": fp_clean}


def evaluate(detect: Any, split: str, n_generated: int = 600) -> dict[str, Any]:
    """Score `detect(text) -> list[Span]` on a split: the headline over hand + mimesis (Latin
    script), and each slice on its own."""
    slices = build(split, n_generated)
    examples = split == "dev"
    out: dict[str, Any] = {"split": split, "seed": SEEDS[split],
                           "n": {name: len(s) for name, s in slices.items()}}
    preds = {name: [detect(s.text) for s in samples] for name, samples in slices.items()}
    headline = slices["hand"] + slices["mimesis"]
    out["headline"] = score(headline, preds["hand"] + preds["mimesis"], examples=examples)
    for name in slices:
        out[name] = score(slices[name], preds[name], examples=examples)
    per = out["headline"]["per_type"]
    out["targets_met"] = all(per[k]["meets_target"] for k in KINDS if per[k]["gold"] or per[k]["pred"])
    return out


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def table_rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """(type, gold, P, R, hand R, mimesis R, non-Latin R, meets target) rows for printing."""
    rows = []
    for k in KINDS:
        m = result["headline"]["per_type"][k]
        if not m["gold"] and not m["pred"]:
            continue
        rows.append((k, str(m["gold"]), _fmt(m["precision"]), _fmt(m["recall"]),
                     _fmt(result["hand"]["per_type"][k]["recall"]), _fmt(result["mimesis"]["per_type"][k]["recall"]),
                     _fmt(result["non_latin"]["per_type"][k]["recall"]), "yes" if m["meets_target"] else "NO"))
    return rows


TABLE_HEADER = ("type", "gold", "P", "R", "R hand", "R mimesis", "R non-Latin", "meets target")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("dev", "holdout"), default="dev")
    ap.add_argument("--misses", action="store_true", help="print the dev split's misses and false positives")
    args = ap.parse_args(argv)
    from collector._anonymize import Anonymizer

    anonymizer = Anonymizer()

    def detect(text: str) -> list[Span]:
        return [Span(kind, s, e) for s, e, kind, _key in anonymizer.detect(text)]

    result = evaluate(detect, args.split)
    print(f"{args.split}: {result['n']}")
    for row in table_rows(result):
        print("  ".join(c.rjust(11) for c in row))
    if args.misses and args.split == "dev":
        for k, m in result["headline"]["per_type"].items():
            for miss in m["missed"]:
                print(f"MISS {k}: {miss['span']!r} in {miss['text']!r}")
            for fp in m["false_pos"]:
                print(f"FP   {k}: {fp['span']!r} in {fp['text']!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
