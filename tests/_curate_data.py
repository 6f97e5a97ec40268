"""Synthetic trajectories for the curation tests and the export measurements: learnable quality,
task topics (so clusters mean something), planted duplicates, optional size padding."""

from __future__ import annotations

import random
import zlib
from datetime import datetime, timedelta, timezone

from sdk._types import Message, Outcome, Step, ToolCall, ToolCallFunction, Trajectory, TurnTokens

TOPICS = {
    "math": "sum product integer divide modulo prime factor equation",
    "web": "html request header cookie browser server route status",
    "sql": "select table join index query column schema transaction",
    "files": "directory path permission read write buffer stream disk",
}
_T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def sentence(rng: random.Random, topic: str, n: int) -> str:
    """`n` words mixing the topic's words with generic filler."""
    words = TOPICS[topic].split() + ["the", "a", "value", "then", "result", "check", "next", "step"]
    return " ".join(rng.choice(words) + (str(rng.randrange(100)) if rng.random() < 0.3 else "") for _ in range(n))


def make(
    i: int,
    *,
    good: bool,
    rng: random.Random,
    task: str | None = None,
    labeled: bool = True,
    app: str = "demo",
    version: str = "policy-v1",
    pad_to: int = 0,
    tokens: bool = True,
    prompt: str | None = None,
) -> Trajectory:
    """One trajectory; `good` ones finish cleanly with an answer, bad ones hit errors and loop."""
    topic = list(TOPICS)[i % len(TOPICS)] if task is None else list(TOPICS)[zlib.crc32(task.encode()) % len(TOPICS)]
    task = task or f"{topic}-{i % 40}"
    user = prompt or f"Task {task}: {sentence(random.Random(task), topic, 12)}"  # one prompt per task
    msgs = [Message(role="system", content="You are a careful agent."), Message(role="user", content=user)]
    steps = []
    for k in range(rng.randint(1, 3)):
        call = ToolCall(id=f"c{i}-{k}", function=ToolCallFunction(name="python", arguments=f'{{"code": "{sentence(rng, topic, 6)}"}}'))
        retry = not good and k > 0 and rng.random() < 0.5
        msgs.append(Message(role="assistant", content="let me try again" if retry else sentence(rng, topic, 8), tool_calls=[call]))
        # Noisy signals: quality is learnable, not given away by any one feature.
        failed = rng.random() < (0.6 if not good else 0.2)
        obs = f"Traceback (most recent call last): Error {sentence(rng, topic, 4)} failed" if failed else sentence(rng, topic, 10)
        msgs.append(Message(role="tool", tool_call_id=call.id, content=obs))
        steps.append(Step(index=k, action=call.function.arguments, observation=obs))
    if rng.random() < (0.85 if good else 0.4):
        msgs.append(Message(role="assistant", content=f"The answer is {rng.randrange(1000)}. {sentence(rng, topic, 10)}"))
    if pad_to:  # pad the first observation (the prompt stays the task's)
        size = sum(len(m.content or "") for m in msgs)
        if size < pad_to:
            msgs[3] = msgs[3].model_copy(update={"content": f"{msgs[3].content}\n{sentence(rng, topic, (pad_to - size) // 7)}"})
    asst = [j for j, m in enumerate(msgs) if m.role == "assistant"]
    turns = [TurnTokens(message_index=j, prompt_token_ids=[1, 2, j], completion_token_ids=[j, j + 1],
                        completion_logprobs=[-0.1, rng.gauss(-0.5 if good else -1.0, 0.6)]) for j in asst] if tokens else []
    reward = (1.0 if good else 0.0) if labeled else None
    t0 = _T0 + timedelta(seconds=i)
    return Trajectory(
        id=f"t{i:06d}", app=app, task_id=task, model="policy", served_version=version, messages=msgs, turns=turns,
        steps=steps, outcome=None if reward is None else Outcome(success=good, reward=reward),
        started_at=t0, finished_at=t0 + timedelta(seconds=rng.randint(1, 30)),
    )
