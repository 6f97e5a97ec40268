"""`trainer suite from-holdout`: a prompt suite from production data `collector export --holdout` held out.

`collector export --format sft --holdout F --out data.jsonl` sends a deterministic fraction F of tasks to
`data.holdout.jsonl` (chat records with their verified outcome: reward, score, whether a user corrected
it). Each record whose answer is verified — a user correction (the corrected answer is the expected
one), a reward >= `min_reward`, or, for data judged only by feedback, a score >= `min_score` — becomes
one scripted-prompt task:

    system messages        -> the suite's system prompt when all records share one, else folded into turn 1
    user / tool messages   -> the scripted turns, up to the last assistant message
    last assistant message -> the expected answer (its tool calls as JSON when it has no text)

Records with the same turns are kept once; unverified ones are counted and left out. The fraction F is
read from `data.manifest.json` beside the holdout file and written into the suite, so the retrain job
exports with the same holdout and these tasks never become training data.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sdk.infra import atomic_write

from . import _defaults as D
from ._prompt_suite import _expected_ok, parse_checker, prompt_suite
from .errors import SuiteError

SLICE_BY = ("app", "task", "none")


@dataclass
class HoldoutSuite:
    """What `suite_from_holdout` built: the header and the cases (write them with `write`), and the counts."""

    header: dict[str, Any]
    cases: list[dict[str, Any]]
    read: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def write(self, out: Path) -> None:
        """Write the suite JSONL atomically (header line first)."""
        lines = [json.dumps({"suite": self.header})] + [json.dumps(c) for c in self.cases]
        atomic_write(out, ("\n".join(lines) + "\n").encode())


def _verified(rec: dict[str, Any], min_reward: float, min_score: Optional[float]) -> bool:
    if rec.get("corrected"):
        return True
    if rec.get("reward") is not None and float(rec["reward"]) >= min_reward:
        return True
    return min_score is not None and rec.get("score") is not None and float(rec["score"]) >= min_score


def _split(messages: list[dict[str, Any]]) -> tuple[Optional[str], list[str], Optional[str]]:
    """(system prompt, scripted turns, expected answer) of one recorded conversation."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None:
        return None, [], None
    system = "\n".join(str(m.get("content") or "") for m in messages[:last] if m.get("role") == "system") or None
    turns = [str(m.get("content") or "") for m in messages[:last] if m.get("role") in ("user", "tool")]
    answer = messages[last]
    expected = answer.get("content") or (json.dumps(answer["tool_calls"]) if answer.get("tool_calls") else None)
    return system, [t for t in turns if t], expected


def _holdout_fraction(path: Path) -> Optional[float]:
    stem = path.name[: -len(".holdout.jsonl")] if path.name.endswith(".holdout.jsonl") else None
    if stem is None:
        return None
    try:
        manifest = json.loads((path.with_name(stem + ".manifest.json")).read_text())
        return float(manifest["holdout"]["fraction"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def suite_from_holdout(
    path: Path,
    *,
    checker: str = "exact",
    min_reward: float = D.MIN_REWARD,
    min_score: Optional[float] = None,
    slice_by: str = "app",
    name: Optional[str] = None,
    max_tokens: int = D.PROMPT_MAX_TOKENS,
    seed: int = D.EVAL_SEED,
) -> HoldoutSuite:
    """Build a prompt suite from the holdout JSONL at `path` (see the module docstring)."""
    if slice_by not in SLICE_BY:
        raise SuiteError(f"--slice-by must be one of {', '.join(SLICE_BY)}, not {slice_by!r}")
    parse_checker(checker)  # a bad checker fails before reading anything
    if not path.is_file():
        raise SuiteError(f"{path} does not exist; write one with `collector export --format sft --holdout 0.1 "
                         "--out data.jsonl` (it writes data.holdout.jsonl)")
    skipped: Counter[str] = Counter()
    rows: list[tuple[Optional[str], dict[str, Any]]] = []
    seen: set[tuple[str, ...]] = set()
    ids: Counter[str] = Counter()
    read = 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            read += 1
            try:
                rec = json.loads(line)
                messages = rec["messages"]
            except (ValueError, KeyError, TypeError):
                raise SuiteError(f"{path}:{n}: not an SFT record with `messages` (export with --format sft)") from None
            if not _verified(rec, min_reward, min_score):
                skipped["not verified"] += 1
                continue
            system, turns, expected = _split(messages)
            if not turns or expected is None:
                skipped["no prompt or no answer"] += 1
                continue
            if _expected_ok(checker, expected) is not None:
                skipped[f"answer does not fit the checker {checker}"] += 1
                continue
            key = (system or "", *turns)
            if key in seen:
                skipped["duplicate prompt"] += 1
                continue
            seen.add(key)
            task_id = str(rec.get("task_id") or rec.get("id") or f"line-{n}")
            ids[task_id] += 1
            case: dict[str, Any] = {"id": task_id if ids[task_id] == 1 else f"{task_id}#{ids[task_id]}",
                                    "turns": turns, "expected": expected}
            if slice_by != "none":
                case["slice"] = str(rec.get("app" if slice_by == "app" else "task_id") or "unknown")
            rows.append((system, case))
    if not rows:
        why = ", ".join(f"{k}: {v}" for k, v in skipped.items()) or "the file is empty"
        raise SuiteError(f"{path}: no verified record to build a suite from ({read} read; {why}); lower --min-reward "
                         "or pass --min-score for feedback-scored data")
    systems = {s for s, _ in rows}
    shared = systems.pop() if len(systems) == 1 else None
    cases = []
    for system, case in rows:
        if system and shared is None:  # per-record system prompts: fold each into its first turn
            case["turns"] = [f"{system}\n\n{case['turns'][0]}", *case["turns"][1:]]
        cases.append(case)
    header = {"name": name or path.name.removesuffix(".jsonl"), "checker": checker, "max_tokens": max_tokens,
              "temperature": 1.0, "seed": seed, "system_prompt": shared, "holdout": _holdout_fraction(path),
              "built_from": str(path)}
    prompt_suite(cases, checker=checker, where=str(path))  # the result must load
    return HoldoutSuite(header, cases, read=read, skipped=dict(skipped))
