"""The three export formats, as pure functions from stored rows to JSONL lines (no I/O).

- `sft_line`: one chat per trajectory; with a user correction, the messages before the corrected
  assistant message plus the correction (`_export_correction` says which message it replaces).
- `dpo_lines`: within one task, trajectories with equal prompts ranked by score, best paired with
  worst while strictly better; a correction pairs against the message it corrected, after the
  same history.
- `grpo_lines`: one line per (task, prompt) group of at least two scored trajectories, token ids
  and logprobs re-indexed to the completion.

The exact line shapes are in `_export.py`'s docstring. The prompt is the messages before the first
assistant message; prompts compare with whitespace collapsed. What a function cannot use it reports
through `drop(reason, n)` (`no_score`, `unpaired`, `group_too_small`), never silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from sdk import wire

from ._export_correction import Correction, corrected_index, generated_indexes


def _msgs(ms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if v is not None} for m in ms]


def _prompt_len(ms: list[dict[str, Any]]) -> int:
    """Number of messages before the first assistant message (the prompt)."""
    for i, m in enumerate(ms):
        if m.get("role") == "assistant":
            return i
    return len(ms)


def _prompt_key(ms: list[dict[str, Any]]) -> str:
    norm = [[m.get("role"), " ".join((m.get("content") or "").split())] for m in ms[: _prompt_len(ms)]]
    return hashlib.sha256(json.dumps(norm).encode()).hexdigest()


class Row:
    """One candidate trajectory: its columns, parsed data and correction."""

    __slots__ = ("id", "task_id", "app", "version", "reward", "score", "success", "data", "correction")

    def __init__(self, r: Any, data: dict[str, Any], correction: Correction | None) -> None:
        self.id, self.task_id, self.app, self.version = r.id, r.task_id, r.app, r.served_version
        self.reward, self.score, self.success = r.reward, r.score, r.success
        self.data, self.correction = data, correction


def _answer(c: Correction) -> dict[str, Any]:
    return {"role": "assistant", "content": c.text}


def _not_generated_weighed_zero(data: dict[str, Any], ms: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """`ms` with `"weight": 0` (OpenAI's fine-tuning field: do not train on it) on each assistant message before
    `keep` that the model did not write (`generated_indexes`: known for captured conversations): a few-shot
    example, a tool call the application made up. Where it is not known, every assistant message trains."""
    generated = generated_indexes(data)
    if not generated:
        return ms
    return [{**m, "weight": 0} if i < keep and m.get("role") == "assistant" and i not in generated else m
            for i, m in enumerate(ms)]


def sft_line(row: Row) -> dict[str, Any]:
    """The `sft` line of one trajectory (with a correction: the history before the message it corrects,
    then the correction). Assistant messages the model did not write are in the history, weighed 0."""
    ms = row.data["messages"]
    keep = len(ms)
    if row.correction is not None:
        keep = corrected_index(row.data, row.correction.response_id)
        ms = ms[:keep] + [_answer(row.correction)]
    ms = _not_generated_weighed_zero(row.data, _msgs(ms), keep)
    line = {"id": row.id, "task_id": row.task_id, "app": row.app, "served_version": row.version,
            "reward": row.reward, "score": row.score, "corrected": row.correction is not None, "messages": ms}
    tools = (row.data.get("metadata") or {}).get(wire.TOOLS_KEY)
    # The tools the conversation was given (captured traffic records them), on corrected lines too. They
    # were dropped there while a corrected line was only the first prompt plus a text answer; now the kept
    # history may call them, and either way the model had them in its prompt (the chat template renders
    # them) when it wrote the message the correction replaces: without them the line trains an answer in
    # a context serving never shows.
    if tools:
        line["tools"] = tools
    return line


def _completion(row: Row) -> list[dict[str, Any]]:
    ms = row.data["messages"]
    return _msgs(ms[_prompt_len(ms):])


#: A line to write, the row that decides its app/task/holdout side, and the trajectory ids it uses.
Line = tuple[dict[str, Any], Row, tuple[str, ...]]


def _scored_by_prompt(rows: list[Row], drop: Callable[[str, int], None]) -> list[list[Row]]:
    """`rows` with a score, grouped by equal prompt (in first-seen order); the unscored are dropped."""
    by_prompt: dict[str, list[Row]] = {}
    for r in rows:
        if r.score is None:
            drop("no_score", 1)
        else:
            by_prompt.setdefault(_prompt_key(r.data["messages"]), []).append(r)
    return list(by_prompt.values())


def dpo_lines(rows: list[Row], drop: Callable[[str, int], None]) -> list[Line]:
    """The `dpo` pairs of `rows` (one task): corrections first, then best-against-worst per prompt."""
    out: list[Line] = []

    def pair(chosen: Row, rejected: Row) -> dict[str, Any]:
        ms = rejected.data["messages"]
        return {"task_id": rejected.task_id, "prompt": _msgs(ms[: _prompt_len(ms)]), "chosen": _completion(chosen),
                "rejected": _completion(rejected), "chosen_id": chosen.id, "rejected_id": rejected.id,
                "chosen_score": chosen.score, "rejected_score": rejected.score, "source": "score"}

    for r in rows:
        if r.correction is not None:
            out.append((_correction_pair(r, r.correction), r, (r.id,)))
    for group in _scored_by_prompt(rows, drop):
        ranked = sorted(group, key=lambda x: (-x.score, x.id))
        used = 0
        for i in range(len(ranked) // 2):
            best, worst = ranked[i], ranked[-1 - i]
            if best.score <= worst.score:
                break
            out.append((pair(best, worst), best, (best.id, worst.id)))
            used += 2
        drop("unpaired", len(group) - used)
    return out


def _correction_pair(r: Row, c: Correction) -> dict[str, Any]:
    """The `dpo` pair of a correction: after the history before the corrected message, the correction
    (chosen, score 1) against that message alone (rejected)."""
    ms = r.data["messages"]
    k = corrected_index(r.data, c.response_id)
    return {"task_id": r.task_id, "prompt": _msgs(ms[:k]), "chosen": [_answer(c)], "rejected": _msgs(ms[k:k + 1]),
            "chosen_id": r.id, "rejected_id": r.id, "chosen_score": 1.0, "rejected_score": r.score,
            "source": "correction"}


def grpo_lines(rows: list[Row], drop: Callable[[str, int], None]) -> list[Line]:
    """The `grpo` groups of `rows` (one task): one line per prompt with at least two scored trajectories."""
    out = []
    for group in _scored_by_prompt(rows, drop):
        if len(group) < 2:
            drop("group_too_small", len(group))
            continue
        ms = group[0].data["messages"]
        k = _prompt_len(ms)
        completions = []
        for r in group:
            kr = _prompt_len(r.data["messages"])
            turns = [{**t, "message_index": t["message_index"] - kr} for t in r.data.get("turns") or []
                     if t.get("message_index", -1) >= kr]
            completions.append({"id": r.id, "served_version": r.version, "reward": r.reward, "score": r.score,
                                "success": r.success, "messages": _completion(r), "turns": turns})
        line = {"task_id": group[0].task_id, "prompt": _msgs(ms[:k]), "rewards": [r.score for r in group],
                "completions": completions}
        out.append((line, group[0], tuple(r.id for r in group)))
    return out

