"""Anonymizer benchmark: looplift's rule-based anonymizer vs Presidio's pattern recognizers.

    .venv/bin/python bench/anonymize.py [--n 2000] [--seed 7] [--json-out bench/results/anonymize.json]

Generates `n` synthetic sentences with Faker (seeded, generated in the same run), each holding one
or two PII values whose exact spans are known because the generator inserts them, plus ~20%
sentences without PII but full of numbers (arithmetic, dates, versions, ids) to measure false
positives. Both systems see exactly the same sentences, one call per sentence.

Scoring, per entity type: a prediction is a true positive if it overlaps a gold span of the same
type. Precision = true-positive predictions / predictions of that type; recall = gold spans hit by
at least one prediction of that type / gold spans. Presidio types are mapped: EMAIL_ADDRESS ->
EMAIL, PHONE_NUMBER -> PHONE, IP_ADDRESS -> IPV4 / IPV6 (by the gold type it overlaps; by the
presence of ":" when it overlaps none), CREDIT_CARD -> CREDIT_CARD. Presidio has no recognizer for
API keys, JWTs or private keys: those rows are n/a for it.

Presidio runs fully offline: an NLP engine wrapping `spacy.blank("en")` (no NER model, so only the
pattern recognizers fire), asked only for the four comparable entity types (this makes it faster,
not slower, so the throughput ratio is conservative), and tldextract pinned to its bundled public
suffix snapshot so the email recognizer never goes to the network.

Needs the `bench` extras: presidio-analyzer, faker (spaCy comes with presidio-analyzer). If
Presidio cannot be imported the benchmark still reports looplift alone.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import platform
import random
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from faker import Faker  # noqa: E402
from faker.providers.credit_card import Provider as CardProvider  # noqa: E402

from collector import anonymize_text  # noqa: E402

KINDS = ("EMAIL", "PHONE", "IPV4", "IPV6", "CREDIT_CARD", "API_KEY", "JWT")
PRESIDIO_KINDS = ("EMAIL", "PHONE", "IPV4", "IPV6", "CREDIT_CARD")
PRESIDIO_ENTITIES = ["EMAIL_ADDRESS", "PHONE_NUMBER", "IP_ADDRESS", "CREDIT_CARD"]
PRESIDIO_MAP = {"EMAIL_ADDRESS": "EMAIL", "PHONE_NUMBER": "PHONE", "CREDIT_CARD": "CREDIT_CARD"}
PHONE_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR")

TARGET_RECALL = 0.95
TARGET_PRECISION = 0.90
TARGET_SPEEDUP = 50.0


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int
    sub: str = ""  # gold only: the generator's format (phone locale, card type, key vendor)


@dataclass(frozen=True)
class Sample:
    text: str
    gold: tuple[Span, ...]


# ---------------------------------------------------------------------------------------------
# Data generation


class Gen:
    def __init__(self, seed: int) -> None:
        Faker.seed(seed)
        self.rng = random.Random(seed)
        self.fake = Faker(list(PHONE_LOCALES))

    def _alnum(self, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def value(self, kind: str) -> tuple[str, str]:
        """A fresh value of `kind` and its sub-format label (for the per-format breakdown)."""
        f, r = self.fake, self.rng
        if kind == "EMAIL":
            return (f["en_US"].email(), "") if r.random() < 0.5 else (f[r.choice(PHONE_LOCALES)].free_email(), "")
        if kind == "PHONE":
            loc = r.choice(PHONE_LOCALES)
            return f[loc].phone_number(), loc
        if kind == "IPV4":
            return f["en_US"].ipv4(), ""
        if kind == "IPV6":
            return f["en_US"].ipv6(), ""
        if kind == "CREDIT_CARD":
            # Same distribution as credit_card_number() with no argument, but we keep the type.
            ctype = r.choice(list(CardProvider.credit_card_types))
            num = f["en_US"].credit_card_number(card_type=ctype)
            if len(num) == 16 and r.random() < 0.4:  # also the grouped way people type them
                sep = r.choice(" -")
                num = sep.join(num[i:i + 4] for i in range(0, 16, 4))
                ctype += "_grouped"
            return num, ctype
        if kind == "API_KEY":
            which = r.randrange(3)
            if which == 0:
                return "sk-" + self._alnum(40), "openai"
            if which == 1:
                return "ghp_" + self._alnum(36), "github"
            return "AKIA" + self._alnum(16, string.ascii_uppercase + string.digits), "aws"
        if kind == "JWT":
            def b64(obj: dict[str, Any]) -> str:
                raw = json.dumps(obj, separators=(",", ":")).encode()
                return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
            header = b64({"alg": r.choice(["HS256", "RS256"]), "typ": "JWT"})
            payload = b64({"sub": str(r.randrange(10**6)), "name": f["en_US"].name(),
                           "iat": r.randrange(1_600_000_000, 1_750_000_000)})
            sig = self._alnum(43, string.ascii_letters + string.digits + "-_")
            return f"{header}.{payload}.{sig}", ""
        raise ValueError(kind)

    # Templates: "{}" slots are filled with values of the listed kinds, in order.
    ONE = (
        "Please contact {} for details.",
        "The user reported that {} was not working after the update.",
        "Logged in from {} at 09:14 yesterday.",
        "value: {}",
        "Error 403 while calling the API with {}; retried 3 times.",
        "I already sent it to {}, can you check?",
        'config = {{"contact": "{}", "retries": 5}}',
        "> {}\n(quoted from the ticket #4821)",
        "Output of step 2: {}.",
        "Saved {} in the notes (line 17).",
        "Here it is: {}",
        "tool result: {{'ok': true, 'value': '{}'}}",
    )
    BY_KIND = {
        "EMAIL": ("Send the invoice to {}.", "From: {}\nSubject: Q3 report", "email={}&page=2",
                  "Reach me at <{}> anytime."),
        "PHONE": ("Call me on {} tomorrow.", "Tel.: {}", "phone: {}, ext. desk 4",
                  "You can reach the office at {} between 9 and 17."),
        "IPV4": ("ssh admin@{} -p 22", "The server at {} returned 502.", "ping {}",
                 "Allowed hosts: {}, localhost"),
        "IPV6": ("Connecting to [{}]:8443 failed.", "inet6 {} prefixlen 64", "Peer {} is unreachable.",
                 "AAAA record points to {}."),
        "CREDIT_CARD": ("Charge the card {} for $129.99.", "card number: {} exp 04/27",
                        "Payment with {} was declined.", "cc={}"),
        "API_KEY": ("export OPENAI_API_KEY={}", "Use the token {} for the CI job.",
                    'headers = {{"Authorization": "Bearer {}"}}', "aws_access_key_id = {}"),
        "JWT": ("Authorization: Bearer {}", "The session cookie was {}.", "jwt: {}",
                "token={}&expires=3600"),
    }
    TWO = (
        "User {} logged in from {}.",
        "Forward {} to the team and note {} in the log.",
        "{} | {}",
        "Details: first {}, then {}.",
        "contact={}; secondary={}",
    )

    def pii_sample(self) -> Sample:
        r = self.rng
        kinds = [r.choice(KINDS)] if r.random() < 0.65 else [r.choice(KINDS), r.choice(KINDS)]
        if len(kinds) == 1:
            k = kinds[0]
            template = r.choice(self.BY_KIND[k] + self.ONE)
        else:
            template = r.choice(self.TWO)
        values = [self.value(k) for k in kinds]
        # Fill the slots while recording where each value lands.
        parts = template.replace("{{", "\0").replace("}}", "\1").split("{}")
        text, gold = "", []
        for i, part in enumerate(parts):
            text += part.replace("\0", "{").replace("\1", "}")
            if i < len(values):
                value, sub = values[i]
                gold.append(Span(kinds[i], len(text), len(text) + len(value), sub))
                text += value
        return Sample(text, tuple(gold))

    def clean_sample(self) -> Sample:
        r, f = self.rng, self.fake["en_US"]
        a, b, c = r.randrange(2, 999), r.randrange(2, 999), r.randrange(2, 99)
        d = f.date_between("-5y", "+1y")
        choices = (
            f"The result of {a}+{b}*{c} is {a + b * c}.",
            f"{a} * {b} = {a * b}, and {a * b} - {c} = {a * b - c}.",
            f"Released version {r.randrange(1, 20)}.{r.randrange(0, 40)}.{r.randrange(0, 200)} on {d.isoformat()}.",
            f"Meeting moved to {d.strftime('%d/%m/%Y')} at {r.randrange(0, 24):02d}:{r.randrange(0, 60):02d}.",
            f"Order #{r.randrange(10000, 99999)} shipped {c} items totaling ${r.randrange(10, 9999)}.{r.randrange(0, 100):02d}.",
            f"lr = {r.random():.6f}; eps = 1e-{r.randrange(3, 12)}; steps = {r.randrange(1000, 200000)}",
            f"Timestamp {r.randrange(1_600_000_000_000, 1_750_000_000_000)} ms, took {r.randrange(1, 9999)} us.",
            f"Build {d.strftime('%Y%m%d')}.{r.randrange(1, 50)} finished in {r.random() * 500:.2f} s.",
            f"x = np.arange({a})[{c}::{r.randrange(2, 9)}]; print(x.shape)",
            f"The population grew from {r.randrange(10**6, 10**8):,} to {r.randrange(10**6, 10**8):,} in {d.year}.",
            f"Coordinates {r.uniform(-90, 90):.5f}, {r.uniform(-180, 180):.5f} (accuracy {c} m).",
            f"assert f({a}, {b}) == {a * b} + {c} - {c}",
            f"Score: {r.randrange(0, 100)}/{100}, rank {r.randrange(1, 5000)} of {r.randrange(5000, 90000)}.",
            f"Line {a}, column {b}: expected ';' (0x{r.randrange(0, 2**32):08x}).",
        )
        return Sample(r.choice(choices), ())

    def dataset(self, n: int) -> list[Sample]:
        return [self.clean_sample() if self.rng.random() < 0.2 else self.pii_sample() for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Systems


def looplift_predict(text: str) -> list[Span]:
    return [Span(e.kind, e.start, e.end) for e in anonymize_text(text)[1]]


def build_presidio() -> Any:
    """An AnalyzerEngine on a blank spaCy pipeline; raises if Presidio cannot run offline."""
    import spacy
    import tldextract
    import tldextract.tldextract as tldmod
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    # Email validation calls tldextract.extract, which otherwise fetches the public suffix list.
    tldmod.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": "blank"}])
    engine.nlp = {"en": spacy.blank("en")}  # what load() would set; no model download
    analyzer = AnalyzerEngine(nlp_engine=engine, supported_languages=["en"])
    analyzer.analyze("warm up a@b.com 10.0.0.1", language="en", entities=PRESIDIO_ENTITIES)
    return analyzer


def presidio_raw(analyzer: Any, text: str) -> list[tuple[str, int, int]]:
    res = analyzer.analyze(text, language="en", entities=PRESIDIO_ENTITIES)
    return [(r.entity_type, r.start, r.end) for r in res]


def map_presidio(raw: list[tuple[str, int, int]], text: str, gold: tuple[Span, ...]) -> list[Span]:
    out = []
    for etype, s, e in raw:
        if etype == "IP_ADDRESS":
            hit = [g.kind for g in gold if g.kind in ("IPV4", "IPV6") and g.start < e and s < g.end]
            kind = hit[0] if hit else ("IPV6" if ":" in text[s:e] else "IPV4")
        else:
            kind = PRESIDIO_MAP.get(etype)
            if kind is None:
                continue
        out.append(Span(kind, s, e))
    return out


# ---------------------------------------------------------------------------------------------
# Scoring


def score(samples: list[Sample], preds: list[list[Span]], kinds: tuple[str, ...]) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {
        k: {"gold": 0, "gold_hit": 0, "pred": 0, "pred_tp": 0, "missed": [], "false_pos": []} for k in kinds
    }
    by_sub: dict[str, dict[str, list[int]]] = {k: {} for k in kinds}  # kind -> sub -> [gold, hit]
    fp_clean = 0
    for sample, pred in zip(samples, preds):
        text = sample.text
        for g in sample.gold:
            if g.kind not in per:
                continue
            per[g.kind]["gold"] += 1
            counts = by_sub[g.kind].setdefault(g.sub or "-", [0, 0])
            counts[0] += 1
            if any(p.kind == g.kind and p.start < g.end and g.start < p.end for p in pred):
                per[g.kind]["gold_hit"] += 1
                counts[1] += 1
            elif len(per[g.kind]["missed"]) < 12:
                per[g.kind]["missed"].append({"span": text[g.start:g.end], "format": g.sub, "text": text})
        for p in pred:
            if p.kind not in per:
                continue
            per[p.kind]["pred"] += 1
            if any(p.kind == g.kind and p.start < g.end and g.start < p.end for g in sample.gold):
                per[p.kind]["pred_tp"] += 1
            else:
                if not sample.gold:
                    fp_clean += 1
                if len(per[p.kind]["false_pos"]) < 12:
                    per[p.kind]["false_pos"].append({"span": text[p.start:p.end], "text": text})
    for k, m in per.items():
        m["recall"] = m["gold_hit"] / m["gold"] if m["gold"] else None
        m["precision"] = m["pred_tp"] / m["pred"] if m["pred"] else None
        if len(by_sub[k]) > 1:
            m["recall_by_format"] = {
                sub: {"gold": g, "recall": round(h / g, 4)} for sub, (g, h) in sorted(by_sub[k].items())
            }
        m["meets_target"] = (
            m["recall"] is not None and m["recall"] >= TARGET_RECALL
            and (m["precision"] if m["precision"] is not None else 1.0) >= TARGET_PRECISION
        )
    return {"per_type": per, "false_positives_on_clean_sentences": fp_clean}


def timed(fn: Any, texts: list[str], repeats: int) -> float:
    """Best-of-`repeats` wall time to process every text once."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for t in texts:
            fn(t)
        best = min(best, time.perf_counter() - t0)
    return best


# ---------------------------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "anonymize.json")
    ap.add_argument("--no-presidio", action="store_true", help="benchmark looplift alone")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    samples = Gen(args.seed).dataset(args.n)
    texts = [s.text for s in samples]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    n_clean = sum(1 for s in samples if not s.gold)

    ll_preds = [looplift_predict(t) for t in texts]
    ll_score = score(samples, ll_preds, KINDS)
    ll_time = timed(anonymize_text, texts, repeats=5)

    pr_score: dict[str, Any] | None = None
    pr_time: float | None = None
    pr_error: str | None = None
    if not args.no_presidio:
        try:
            analyzer = build_presidio()
        except Exception as exc:  # report looplift alone
            pr_error = f"{type(exc).__name__}: {exc}"
        else:
            t0 = time.perf_counter()
            raw = [presidio_raw(analyzer, t) for t in texts]
            pr_time = time.perf_counter() - t0
            pr_preds = [map_presidio(r, s.text, s.gold) for r, s in zip(raw, samples)]
            pr_score = score(samples, pr_preds, PRESIDIO_KINDS)

    ll_mbps = mb / ll_time
    pr_mbps = mb / pr_time if pr_time else None
    ratio = ll_mbps / pr_mbps if pr_mbps else None

    # ---- table
    rows = []
    for k in KINDS:
        m = ll_score["per_type"][k]
        p = pr_score["per_type"].get(k) if pr_score else None
        rows.append((k, str(m["gold"]), fmt(m["precision"]), fmt(m["recall"]),
                     fmt(p["precision"]) if p else "n/a", fmt(p["recall"]) if p else "n/a",
                     "yes" if m["meets_target"] else "NO"))
    header = ("type", "gold", "looplift P", "looplift R", "presidio P", "presidio R", "looplift meets")
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"Anonymizer benchmark (n={args.n}, seed={args.seed}, {n_clean} no-PII sentences)")
        for h in header:
            table.add_column(h, justify="left" if h == "type" else "right")
        for row in rows:
            table.add_row(*row)
        Console(width=max(110, Console().width)).print(table)
    except ImportError:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for row in rows:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    for k in ("PHONE", "CREDIT_CARD"):
        for name, sc in (("looplift", ll_score), ("presidio", pr_score)):
            by = sc["per_type"][k].get("recall_by_format") if sc else None
            if by:
                cells = ", ".join(f"{sub} {v['recall']:.2f} ({v['gold']})" for sub, v in by.items())
                print(f"{k} recall by format, {name}: {cells}")
    print(f"false positives on no-PII sentences: looplift {ll_score['false_positives_on_clean_sentences']}"
          + (f", presidio {pr_score['false_positives_on_clean_sentences']}" if pr_score else ""))
    print(f"throughput on {mb:.3f} MB: looplift {ll_mbps:.2f} MB/s"
          + (f", presidio {pr_mbps:.4f} MB/s, ratio {ratio:.1f}x (target >= {TARGET_SPEEDUP:.0f}x)" if ratio else ""))
    if pr_error:
        print(f"presidio not run: {pr_error}")

    structured_ok = all(ll_score["per_type"][k]["meets_target"] for k in KINDS)
    speed_ok = ratio is not None and ratio >= TARGET_SPEEDUP
    result = {
        "n": args.n,
        "seed": args.seed,
        "n_no_pii_sentences": n_clean,
        "n_gold_spans": sum(len(s.gold) for s in samples),
        "bytes": round(mb * 1e6),
        "targets": {"recall": TARGET_RECALL, "precision": TARGET_PRECISION, "speedup": TARGET_SPEEDUP},
        "looplift": {**ll_score, "seconds": ll_time, "mb_per_s": ll_mbps},
        "presidio": (
            {**pr_score, "seconds": pr_time, "mb_per_s": pr_mbps, "entities_requested": PRESIDIO_ENTITIES,
             "nlp": "spacy.blank('en') (pattern recognizers only)",
             "not_supported": [k for k in KINDS if k not in PRESIDIO_KINDS]}
            if pr_score else {"error": pr_error or "skipped (--no-presidio)"}
        ),
        "throughput_ratio_looplift_over_presidio": ratio,
        "targets_met": {
            "per_type": {k: ll_score["per_type"][k]["meets_target"] for k in KINDS},
            "all_types": structured_ok,
            "speedup": speed_ok,
            "all": structured_ok and speed_ok,
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
        },
        "wall_seconds": time.perf_counter() - t_start,
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
