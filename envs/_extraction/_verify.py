"""Grade a submitted answer field by field and say what is wrong with it, the way a reviewer would.

The answer is one JSON object: every field of the task's schema as a JSON number (or null when not
found), no other keys, at most `MAX_ANSWER_BYTES`. An answer that breaks the schema (not an object,
unknown keys, strings, lists, NaN, infinities, numbers beyond `MAX_ABS_VALUE` such as 10**309 or 1e999,
too big) scores 0 and its feedback lists the violations only:
dumping every number of the report into the answer buys nothing, and nothing about the fields leaks.

A valid answer scores the fraction of fields within tolerance (`_truth.tolerance`); success is all of
them. The feedback names, without ever printing an expected value:
    missing     fields absent or null;
    sign        the right magnitude with the wrong sign;
    scale       off by a factor of 1,000 or 1,000,000 (a table in millions read as thousands, ...);
    unit        off by 100 where the unit is cents vs currency, or a fraction vs percent;
    period      the figure of the other fiscal year;
    restated    the prior-year figure as previously reported instead of as restated;
    line        a neighbouring line (basic EPS for diluted, segment operating income for revenue, ...);
    swapped     two fields that hold each other's values (only then: saying "that is field X's value"
                for any number would let a prober map the report's numbers to fields);
    wrong       none of the above;
and the relations the *submitted* numbers break (parts that do not sum to their total, a growth rate
or margin inconsistent with the submitted figures). Relations are feedback only, never reward: an
answer of all zeros satisfies every sum.

Deliberately absent: any model in the loop. The verifier is arithmetic over the ground truth, so text
in the answer or in the document (prompt injection) cannot move it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from sdk import Outcome, Task, Trajectory

from ._tasks import report_for
from ._truth import Kind, Relation, Report, close

#: Largest answer accepted, in bytes of its JSON: a complete answer is ~2 kB.
MAX_ANSWER_BYTES = 16_000
#: Largest magnitude a field may hold. No figure of a report comes near it (money is in thousands); anything
#: larger is a bad value, refused before it reaches float arithmetic (10**309 does not fit a float, and
#: 1e308 + 1e308 is inf, whose difference with itself is NaN).
MAX_ABS_VALUE = 1e15


@dataclass(frozen=True)
class FieldError:
    """One field that did not count: its key, the category (missing, sign, scale, ...) and the message."""

    key: str
    category: str
    message: str


@dataclass(frozen=True)
class Grade:
    """The verdict on one answer. `schema_errors` non-empty means it was rejected whole (score 0)."""

    total: int
    correct: int
    errors: tuple[FieldError, ...] = ()
    broken: tuple[str, ...] = ()
    schema_errors: tuple[str, ...] = ()
    categories: Mapping[str, str] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return 0.0 if self.schema_errors else self.correct / self.total

    @property
    def success(self) -> bool:
        return not self.schema_errors and self.correct == self.total

    def feedback(self, index: int, limit: int) -> str:
        """The text the agent reads after submission `index` (1-based) of `limit`."""
        left = limit - index
        tail = (f"Correct the fields above and submit again ({left} submission{'s' if left != 1 else ''} left)."
                if left > 0 else "No submissions left: this answer is final.")
        if self.schema_errors:
            return "\n".join([f"Submission {index} of {limit} rejected: the answer does not match the schema "
                              "(score 0)."] + [f"  - {e}" for e in self.schema_errors] + [tail])
        if self.success:
            return f"Submission {index} of {limit}: all {self.total} fields correct (score 1.00). Done."
        lines = [f"Submission {index} of {limit}: {self.correct} of {self.total} fields correct "
                 f"(score {self.score:.2f})."]
        missing = [e.key for e in self.errors if e.category == "missing"]
        if missing:
            lines.append(f"Missing fields ({len(missing)}): {', '.join(missing)}.")
        misaligned = [e for e in self.errors if e.category not in ("missing", "wrong")]
        if misaligned:
            lines.append(f"Misaligned numbers ({len(misaligned)}):")
            lines += [f"  - {e.key}: {e.message}" for e in misaligned]
        wrong = [e for e in self.errors if e.category == "wrong"]
        if wrong:
            lines.append(f"Wrong numbers, matching nothing expected for their field ({len(wrong)}): "
                         + "; ".join(f"{e.key} = {e.message.removesuffix(' does not match the report')}"
                                     for e in wrong) + ".")
        if self.broken:
            lines.append(f"Relations your answer breaks ({len(self.broken)}):")
            lines += [f"  - {b}" for b in self.broken]
        return "\n".join(lines + [tail])


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_answer(payload: Any) -> tuple[Optional[dict[str, Any]], list[str]]:
    """The answer object from a tool argument (object or JSON text) or a plain-text reply, or the problems."""
    if isinstance(payload, str):
        text = payload.strip()
        if len(text.encode()) > MAX_ANSWER_BYTES:
            return None, [f"the answer is {len(text.encode()):,} bytes; the limit is {MAX_ANSWER_BYTES:,}"]
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end < start:
            return None, ["no JSON object found: submit one object such as {\"revenue_fy2024\": 1234500, ...}"]
        try:
            payload = json.loads(text[start : end + 1], parse_constant=_reject_constant)
        except (ValueError, RecursionError) as e:
            return None, [f"the answer is not valid JSON ({e}); submit one JSON object with plain numbers"]
    if not isinstance(payload, dict):
        return None, [f"the answer must be a JSON object, got {type(payload).__name__}"]
    try:
        size = len(json.dumps(payload, default=str))
    except (ValueError, RecursionError) as e:  # nested past the recursion limit, an int past str()'s digit limit
        return None, [f"the answer cannot be read back as JSON ({type(e).__name__}); submit one flat JSON object"]
    if size > MAX_ANSWER_BYTES:
        return None, [f"the answer is {size:,} bytes; the limit is {MAX_ANSWER_BYTES:,}"]
    return payload, []


def _schema_errors(report: Report, answer: Mapping[str, Any]) -> list[str]:
    keys = {s.key for s in report.specs}
    errors: list[str] = []
    unknown = [k for k in answer if k not in keys]
    if unknown:
        shown = ", ".join(repr(k) for k in unknown[:8]) + (f" and {len(unknown) - 8} more" if len(unknown) > 8 else "")
        errors.append(f"unknown keys {shown}: use exactly the field names the task lists")
    bad = [k for k in keys if k in answer and not _is_number_or_null(answer[k])]
    for k in sorted(bad)[:8]:
        v = answer[k]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            errors.append(f"{k} is out of range ({_short(v)}): a field holds a finite number between "
                          f"-{MAX_ABS_VALUE:.0e} and {MAX_ABS_VALUE:.0e}, or null")
        else:
            errors.append(f"{k} must be a JSON number or null (no quotes, thousands separators, units or lists), "
                          f"got {_short(v)}")
    if len(bad) > 8:
        errors.append(f"... and {len(bad) - 8} more fields that are not numbers")
    return errors


def _is_number_or_null(v: Any) -> bool:
    # abs() and the comparison work on any int without converting it to float (math.isfinite(10**309) raises
    # OverflowError); NaN compares False, so it is refused too.
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_ABS_VALUE)


def _short(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**30:
        return f"an integer of {len(str(abs(v)))} digits" if abs(v) < 10**4000 else "an integer of over 4,000 digits"
    try:
        s = json.dumps(v, default=str)
    except (ValueError, RecursionError):
        s = f"a {type(v).__name__}"
    return s if len(s) <= 40 else s[:37] + "..."


def _num(v: float) -> str:
    """A number as feedback echoes it: integers with separators, others with 2 decimals (4 digits below 100)."""
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.2f}" if abs(v) >= 100 else f"{v:.4g}"


_SCALES = ((1e3, "1,000"), (1e6, "1,000,000"))


def _near(candidate: float, v: float) -> bool:
    """`v` is `candidate` up to 0.1% (relative, so a zero or a tiny number is never "near" a scaled figure)."""
    return candidate != 0 and v != 0 and abs(v - candidate) <= 1e-3 * abs(candidate)


def _diagnose(report: Report, key: str, kind: Kind, v: float) -> tuple[str, str]:
    """(category, message) for a wrong value of field `key`."""
    t = report.truth[key]
    shown = _num(v)
    if close(kind, -t, v) and v != 0:
        sense = "positive" if t > 0 else "negative"
        return "sign", f"{shown} has the wrong sign: this field is {sense} here (read its description for the sign " \
                       "convention; parentheses in a table mean a negative number)"
    unit = {"money": f"thousands of {report.currency}", "shares": "thousands of shares", "count": "persons",
            "per_share": f"{report.currency} per share", "percent": "percent"}[kind]
    for factor, name in _SCALES:
        for f, direction in ((factor, "too large"), (1 / factor, "too small")):
            if _near(t * f, v) or _near(-t * f, v):
                return "scale", f"{shown} is off by a factor of {name} ({direction}): the field is in {unit}; " \
                                "check the scale the table or sentence states (thousands, millions)"
    if kind == "per_share" and _near(t * 100, v):
        return "unit", f"{shown} looks like cents: the field is in {report.currency} per share (35 cents is 0.35)"
    if kind == "percent" and _near(t / 100, v):
        return "unit", f"{shown} looks like a fraction: the field is in percent (12.5 means 12.5%)"
    for d in report.decoys[key]:
        if close(kind, d.value, v):
            return d.category, f"{shown} {d.why}"
        for factor, name in _SCALES:
            if _near(d.value * factor, v) or _near(d.value / factor, v):
                return d.category, f"{shown} {d.why} (and it is off by a factor of {name})"
    return "wrong", f"{shown} does not match the report"


def _relation_message(rel: Relation, values: Mapping[str, float], kinds: Mapping[str, Kind]) -> Optional[str]:
    """Why the submitted values break `rel`, or None when they satisfy it (or some term is missing)."""
    if rel.target not in values or any(k not in values for k, _ in rel.terms):
        return None
    target = values[rel.target]
    if rel.kind == "sum":
        got = sum(s * values[k] for k, s in rel.terms)
        if abs(got - target) <= max(1.0, 1e-3 * abs(target)):
            return None
        expr = " ".join(("+ " if s > 0 else "- ") + k for k, s in rel.terms).removeprefix("+ ")
        more = "more" if got > target else "less"
        return f"{rel.name}: {expr} = {_num(got)}, {_num(abs(got - target))} {more} than {rel.target} = {_num(target)}"
    (a, _), (b, _) = rel.terms
    if values[b] == 0:
        return f"{rel.name}: {b} is 0, so {rel.target} cannot be checked"
    ratio = values[a] / values[b]
    got = {"ratio_pct": 100 * ratio, "growth_pct": 100 * (ratio - 1), "per_share": ratio}[rel.kind]
    if close(kinds[rel.target], got, target):
        return None
    how = {"ratio_pct": f"100 * {a} / {b}", "growth_pct": f"100 * ({a} / {b} - 1)", "per_share": f"{a} / {b}"}[rel.kind]
    return f"{rel.name}: {rel.target} = {_num(target)}, but {how} = {got:.2f} from your own figures"


def grade(report: Report, answer: Mapping[str, Any]) -> Grade:
    """Score `answer` against the report's ground truth and explain every miss."""
    total = len(report.specs)
    schema = _schema_errors(report, answer)
    if schema:
        return Grade(total=total, correct=0, schema_errors=tuple(schema))
    values = {k: float(v) for k, v in answer.items() if v is not None}
    kinds = {s.key: s.kind for s in report.specs}
    errors: list[FieldError] = []
    wrong: dict[str, float] = {}
    for s in report.specs:
        if s.key not in values:
            errors.append(FieldError(s.key, "missing", "missing"))
        elif not close(s.kind, report.truth[s.key], values[s.key]):
            wrong[s.key] = values[s.key]
    for key, v in wrong.items():
        swap = next((o for o, ov in wrong.items() if o != key and kinds[o] == kinds[key]
                     and close(kinds[key], report.truth[o], v) and close(kinds[o], report.truth[key], ov)), None)
        if swap is not None:
            errors.append(FieldError(key, "swapped", f"{_num(v)} belongs to {swap}, and {swap}'s value to this field "
                                                     "(the two look swapped)"))
        else:
            cat, msg = _diagnose(report, key, kinds[key], v)
            errors.append(FieldError(key, cat, msg))
    broken = tuple(m for r in report.relations if (m := _relation_message(r, values, kinds)) is not None)
    return Grade(total=total, correct=total - len(errors), errors=tuple(errors), broken=broken,
                 categories={e.key: e.category for e in errors})


def grade_payload(report: Report, payload: Any) -> tuple[Grade, Optional[dict[str, Any]]]:
    """`parse_answer` then `grade`; a payload that is not an object is a schema rejection."""
    answer, problems = parse_answer(payload)
    if answer is None:
        return Grade(total=len(report.specs), correct=0, schema_errors=tuple(problems)), None
    return grade(report, answer), answer


class ExtractionVerifier:
    """`sdk.Verifier`: re-grades the episode's last submitted answer against the report's ground truth.

    The answer is read from the last step the environment marked with `info["submission"]` (the
    canonical JSON it graded); the ground truth is regenerated from `task.data["seed"]`, so the verdict
    does not depend on the environment's own score. No submission: reward 0.
    """

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        report = report_for(task)  # the truth generator is cheap; the PDF is not needed to judge
        submitted = next((s.info["submission"] for s in reversed(trajectory.steps) if "submission" in s.info), None)
        if submitted is None:
            return Outcome(success=False, reward=0.0, details={"reason": "no answer was submitted",
                                                               "fields": len(report.specs)})
        g, _ = grade_payload(report, submitted)
        return Outcome(success=g.success, reward=g.score,
                       details={"fields": g.total, "correct": g.correct, "errors": dict(g.categories),
                                "broken_relations": len(g.broken), "schema_errors": list(g.schema_errors),
                                "submissions": sum(1 for s in trajectory.steps if "submission" in s.info)})
