"""Small trajectories for the collector tests (helpers, not fixtures)."""

from __future__ import annotations

from sdk import Message, Outcome, Trajectory, TrajectoryBatch, TurnTokens
from sdk._types import ToolCall, ToolCallFunction


def traj(i: int = 0, *, reward: float | None = 1.0, app: str = "demo", version: str = "policy-v1", content: str = "2+2?") -> Trajectory:
    return Trajectory(
        id=f"traj-{i:04d}",
        app=app,
        task_id=f"task-{i % 3}",
        model="policy",
        served_version=version,
        messages=[
            Message(role="user", content=content),
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="c1", function=ToolCallFunction(name="python", arguments='{"code": "print(2+2)"}'))],
            ),
            Message(role="tool", tool_call_id="c1", content="4"),
            Message(role="assistant", content="4"),
        ],
        turns=[TurnTokens(message_index=3, prompt_token_ids=[1, 2], completion_token_ids=[3], completion_logprobs=[-0.5])],
        outcome=None if reward is None else Outcome(success=reward >= 1.0, reward=reward),
    )


def body(*ts: Trajectory) -> str:
    return TrajectoryBatch(trajectories=list(ts)).model_dump_json()
