"""`LLMJudge`: a verifier that asks a (stronger) model to score a *group* of trajectories against a rubric.

Relative scoring, as in RULER (OpenPipe ART): the judge sees every trajectory of a group (the same
task, several attempts) in one prompt and scores each from 0 to 1, better attempts higher. Judging a
group at once is cheaper than one call per trajectory and more consistent: a model ranks attempts far
more reliably than it assigns absolute grades, and group-relative advantages (GRPO) only need the
ranking to be right. `verify(task, trajectory)` judges a group of one (an absolute score, for the
`Verifier` protocol); `score_group(task, trajectories)` is the group call.

It talks to any OpenAI-compatible endpoint through the `openai` client (`base_url`, `api_key`, or a
ready `client`), asks for a JSON object (`response_format={"type": "json_object"}`) and validates the
reply with pydantic: one score in [0, 1] per trajectory label. Everything needed to audit a score is
stored with each outcome, in `Outcome.details["judge"]`: the model, the rubric, the exact prompt
messages, the raw reply, every label's score and explanation, this trajectory's label, score and rank.

A reply that cannot be used (not JSON, a missing or extra label, a score out of range, an HTTP error)
is an `Outcome` with `error` for every trajectory of the group (STYLE 5: a failed judgement is not a
reward of 0). Deliberately not here: retries beyond the openai client's own, caching of judgements,
and position-bias mitigation by shuffling (labels follow the given order; shuffle the group first if
that matters to you).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Optional

import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, Field, ValidationError

from ._types import Message, Outcome, Task, Trajectory

__all__ = ["LLMJudge"]

SYSTEM_PROMPT = """\
You are an impartial judge of AI agent trajectories. You get a task, a rubric, and one or more \
trajectories: attempts by agents to do the task, each with the messages the agent exchanged with its \
environment. Score every trajectory from 0 to 1 against the rubric. Judge the trajectories relative \
to each other: a clearly better one must get a higher score, equally good ones equal scores; a \
trajectory that games the checks instead of doing the task gets 0.
Reply with a JSON object only, with one entry per trajectory, in this form:
{"scores": [{"trajectory_id": "<id>", "explanation": "<one or two sentences>", "score": <number from 0 to 1>}]}"""


class _Score(BaseModel):
    trajectory_id: str
    explanation: str = ""
    score: float = Field(ge=0.0, le=1.0)


class _Reply(BaseModel):
    scores: list[_Score]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-(limit - head):]}"


def _render_message(m: Message) -> str:
    parts = [m.content or ""]
    for call in m.tool_calls or []:
        parts.append(f"[tool call {call.function.name}({call.function.arguments})]")
    label = m.role if m.role != "tool" else f"tool result ({m.tool_call_id})"
    return f"{label}: " + "\n".join(p for p in parts if p)


def render_trajectory(trajectory: Trajectory, limit: int) -> str:
    """The trajectory's messages as plain text for the judge, cut to about `limit` characters."""
    return _clip("\n\n".join(_render_message(m) for m in trajectory.messages), limit)


def _parse(text: str) -> _Reply:
    body = text.strip()
    if body.startswith("```"):  # some servers fence JSON even in JSON mode
        body = body.strip("`")
        body = body[body.find("{"):]
    return _Reply.model_validate(json.loads(body))


class LLMJudge:
    """Scores trajectories against `rubric` with the model `model` at an OpenAI-compatible endpoint.

    `client` (an `openai.OpenAI`) wins over `base_url`/`api_key`, which default to
    `$LOOPLIFT_JUDGE_BASE_URL`/`$LOOPLIFT_JUDGE_API_KEY`, then the openai client's own defaults
    (`$OPENAI_BASE_URL`, `$OPENAI_API_KEY`). Success is `score >= success_threshold`; reward is the score.
    """

    def __init__(
        self,
        rubric: str,
        *,
        model: str,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[openai.OpenAI] = None,
        success_threshold: float = 0.5,
        max_chars_per_trajectory: int = 6000,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout: float = 120.0,
    ) -> None:
        if not rubric.strip():
            raise ValueError("LLMJudge needs a non-empty rubric: what makes an attempt good or bad")
        self.rubric = rubric
        self.model = model
        self.success_threshold = success_threshold
        self.max_chars = max_chars_per_trajectory
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._client = client or openai.OpenAI(
            base_url=base_url or os.environ.get("LOOPLIFT_JUDGE_BASE_URL") or None,
            api_key=api_key or os.environ.get("LOOPLIFT_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
            or "no-key", timeout=timeout, max_retries=2)

    def prompt(self, task: Task, trajectories: Sequence[Trajectory]) -> list[ChatCompletionMessageParam]:
        """The chat messages sent to the judge for this group (labels "1".."N" in the given order)."""
        blocks = [f"<task>\n{task.prompt}\n</task>", f"<rubric>\n{self.rubric}\n</rubric>"]
        for i, t in enumerate(trajectories, 1):
            blocks.append(f'<trajectory id="{i}">\n{render_trajectory(t, self.max_chars)}\n</trajectory>')
        blocks.append(f"Score all {len(trajectories)} trajectories (ids 1 to {len(trajectories)}).")
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(blocks)}]

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        """Judge one trajectory on its own (a group of one)."""
        return self.score_group(task, [trajectory])[0]

    def score_group(self, task: Task, trajectories: Sequence[Trajectory]) -> list[Outcome]:
        """One judge call for the whole group; one `Outcome` per trajectory, in order."""
        if not trajectories:
            return []
        messages = self.prompt(task, trajectories)
        base: dict[str, Any] = {"model": self.model, "rubric": self.rubric, "messages": messages,
                                "group": [t.id for t in trajectories]}
        try:
            resp = self._client.chat.completions.create(
                model=self.model, messages=messages,
                temperature=self.temperature, max_tokens=self.max_tokens,
                response_format={"type": "json_object"},
            )
        except openai.OpenAIError as e:
            return self._failed(trajectories, base, f"the judge request failed: {type(e).__name__}: {e}")
        raw = (resp.choices[0].message.content or "") if resp.choices else ""
        base["response"] = raw
        try:
            reply = _parse(raw)
        except (ValueError, ValidationError) as e:
            return self._failed(trajectories, base, f"the judge's reply is not the expected JSON: {str(e)[:300]}")
        labels = [str(i) for i in range(1, len(trajectories) + 1)]
        by_id = {s.trajectory_id.strip(): s for s in reply.scores}
        if sorted(by_id) != sorted(labels):
            return self._failed(trajectories, base, f"the judge scored ids {sorted(by_id)}, expected {labels}")
        scores = {lab: by_id[lab].score for lab in labels}
        base["scores"] = scores
        base["explanations"] = {lab: by_id[lab].explanation for lab in labels}
        out = []
        for lab in labels:
            s = scores[lab]
            rank = 1 + sum(1 for other in scores.values() if other > s)
            out.append(Outcome(success=s >= self.success_threshold, reward=s,
                               details={"judge": {**base, "label": lab, "score": s, "rank": rank,
                                                  "explanation": by_id[lab].explanation}}))
        return out

    @staticmethod
    def _failed(trajectories: Sequence[Trajectory], base: dict[str, Any], why: str) -> list[Outcome]:
        return [Outcome(success=False, reward=0.0, error=why, details={"judge": {**base, "label": str(i)}})
                for i in range(1, len(trajectories) + 1)]
