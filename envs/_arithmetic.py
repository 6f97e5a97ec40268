"""The demo task: arithmetic the model solves by writing Python, reading the output, then answering.

An episode:
    user:       Compute: 37+58*2
    assistant:  ```python\nprint(37+58*2)\n```
    user:       Output: 153            (or "Error: ..." with the last line of stderr)
    assistant:  Answer: 153
The verifier checks the final answer against the exact value. A tiny model cannot do the arithmetic in
its head, so it must copy the expression into code faithfully and copy the output back: exactly the
kind of skill that improves by training on its own verified successes.

Held-out tasks come from their own seed and are excluded from every training split, so the demo's
success curve is measured on problems never trained on. This module has no heavy dependencies; the
sandbox is whatever `Sandbox` the caller passes in.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING, Any, Optional

from sdk import Message, Outcome, StepResult, Task, Trajectory

from ._envs import with_pool_stats

if TYPE_CHECKING:
    from sandboxes import Sandbox, SandboxPool

HELD_OUT_SEED = 1_000_003
_OPS = ("+", "-", "*")
_CODE_RE = re.compile(r"```(?:python)?\s*\n(.*?)```", re.DOTALL)
_ANSWER_RE = re.compile(r"Answer:\s*(-?\d+)\s*$")

FORMAT_HINT = "Write Python in a ```python block to compute it, or reply with 'Answer: N'."


def _expression(rng: random.Random) -> str:
    n_operands = rng.choice((2, 3))
    parts = [str(rng.randint(1, 99))]
    for _ in range(n_operands - 1):
        parts.append(rng.choice(_OPS))
        parts.append(str(rng.randint(1, 99)))
    return "".join(parts)


def _task(expr: str) -> Task:
    # The id is the expression itself: held-out exclusion and dedup by task id then need no lookup table.
    return Task(id=f"arith:{expr}", prompt=f"Compute: {expr}", data={"expression": expr, "answer": eval(expr)})


def held_out_tasks(n: int = 100) -> list[Task]:
    """The fixed held-out set (never trained on): `n` distinct problems from `HELD_OUT_SEED`."""
    rng = random.Random(HELD_OUT_SEED)
    seen: dict[str, Task] = {}
    while len(seen) < n:
        expr = _expression(rng)
        seen.setdefault(expr, _task(expr))
    return list(seen.values())


def training_tasks(n: int, seed: int, *, exclude_held_out: int = 100) -> list[Task]:
    """`n` distinct training problems from `seed`, none of which is in the held-out set."""
    banned = {t.id for t in held_out_tasks(exclude_held_out)}
    rng = random.Random(seed)
    seen: dict[str, Task] = {}
    while len(seen) < n:
        expr = _expression(rng)
        if f"arith:{expr}" not in banned:
            seen.setdefault(expr, _task(expr))
    return list(seen.values())


def _miscopy(expr: str, rng: random.Random) -> str:
    digits = [i for i, c in enumerate(expr) if c.isdigit()]
    i = rng.choice(digits)
    wrong = rng.choice([d for d in "0123456789" if d != expr[i]])
    out = expr[:i] + wrong + expr[i + 1 :]
    # A leading zero would make Python reject the literal; keep the demonstration runnable.
    return out if not re.search(r"(^|[^\d])0\d", out) else _miscopy(expr, rng)


def demonstration(task: Task, rng: random.Random, *, miscopy_p: float) -> list[dict[str, str]]:
    """A synthetic episode in OpenAI chat format. With probability `miscopy_p` the code copies the
    expression wrongly (one digit), and the answer faithfully reports that wrong output: the base model
    learns the format and the habit of sometimes miscopying, which is what the loop must train away."""
    expr = str(task.data["expression"])
    code_expr = _miscopy(expr, rng) if rng.random() < miscopy_p else expr
    value = eval(code_expr)
    return [
        {"role": "user", "content": task.prompt},
        {"role": "assistant", "content": f"```python\nprint({code_expr})\n```"},
        {"role": "user", "content": f"Output: {value}"},
        {"role": "assistant", "content": f"Answer: {value}"},
    ]


def parse_answer(text: str) -> Optional[int]:
    """The integer after `Answer:` at the end of a reply, or None (also when the reply holds more than one
    `Answer:`: listing several candidates is not an answer)."""
    if text.count("Answer:") != 1:
        return None
    m = _ANSWER_RE.search(text.strip())
    return int(m.group(1)) if m else None


class ArithmeticEnv:
    """`sdk.Environment` for the demo task. Code runs in a sandbox from `pool` (or a fixed `sandbox`)."""

    def __init__(
        self,
        *,
        pool: "Optional[SandboxPool]" = None,
        sandbox: "Optional[Sandbox]" = None,
        timeout_s: float = 5.0,
    ) -> None:
        if (pool is None) == (sandbox is None):
            raise ValueError("ArithmeticEnv needs exactly one of `pool` or `sandbox`")
        self._pool, self._sandbox, self._timeout = pool, sandbox, timeout_s
        self._task: Optional[Task] = None

    def reset(self, task: Task) -> str:
        self._task = task
        return task.prompt

    def _run(self, code: str) -> tuple[Any, dict[str, Any]]:
        """The run's result, and the pool's stats while this step held its sandbox (none for a fixed sandbox)."""
        if self._sandbox is not None:
            return self._sandbox.run_python(code, timeout=self._timeout), {}
        assert self._pool is not None
        with self._pool.acquire() as sb:
            stats = {"sandbox_pool": self._pool.stats().snapshot()}
            return sb.run_python(code, timeout=self._timeout), stats

    def step(self, action: str) -> StepResult:
        """Answer, format hint, or the code's output; every step carries the pool's stats (`info["sandbox_pool"]`)."""
        # A code step took the snapshot while it held its sandbox; the others take it now.
        return with_pool_stats(self._step(action), self._pool)

    def _step(self, action: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(task) before step()")
        answer = parse_answer(action)
        if answer is not None:
            correct = answer == self._task.data["answer"]
            return StepResult(observation="Correct." if correct else "Incorrect.", reward=float(correct), done=True,
                              info={"answer": answer})
        m = _CODE_RE.search(action)
        if m is None:
            return StepResult(observation=FORMAT_HINT, info={"format_error": True})
        result, pool = self._run(m.group(1))
        if result.timed_out:
            obs = "Error: timed out"
        elif result.exit_code != 0:
            lines = result.stderr.strip().splitlines()
            obs = "Error: " + (lines[-1] if lines else f"exit code {result.exit_code}")
        else:
            obs = "Output: " + result.stdout.strip()[:200]
        return StepResult(observation=obs, info={"exit_code": result.exit_code, "duration_s": result.duration_s, **pool})


class ArithmeticVerifier:
    """`sdk.Verifier`: success iff the last assistant message answers the exact value."""

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        last = next((m.content for m in reversed(trajectory.messages) if m.role == "assistant"), None) or ""
        answer = parse_answer(last)
        expected = int(task.data["answer"])
        ok = answer == expected
        return Outcome(success=ok, reward=float(ok), details={"expected": expected, "answer": answer})


# -- the family: registry entry, reference policies ------------------------------------------------


def _turn(messages: list[Message]) -> int:
    return sum(1 for m in messages if m.role == "assistant")


def _oracle(task: Task, messages: list[Message]) -> str:
    """Computes the value in the sandbox, then answers with the output it read back."""
    if _turn(messages) == 0:
        return f"```python\nprint({task.data['expression']})\n```"
    last = next((m.content or "" for m in reversed(messages) if m.role == "user"), "")
    return f"Answer: {last.removeprefix('Output: ').strip()}"


def _noop(task: Task, messages: list[Message]) -> str:
    """Never computes, never answers."""
    return "I don't know."


def _cheat_expression(task: Task, messages: list[Message]) -> str:
    """Answers with the expression itself, hoping the verifier evaluates it."""
    return f"Answer: {task.data['expression']}"


def _cheat_shotgun(task: Task, messages: list[Message]) -> str:
    """Lists many answers, the right one among them (last), hoping the verifier reads only one line."""
    value = int(task.data["answer"])
    return "\n".join(f"Answer: {v}" for v in [*range(value - 10, value), *range(value + 1, value + 11), value])


def _cheat_echo(task: Task, messages: list[Message]) -> str:
    """Makes the sandbox print the answer line, then never answers itself."""
    if _turn(messages) == 0:
        return f"```python\nprint('Answer:', {task.data['expression']})\n```"
    return "The answer is in the output above."


ARITHMETIC_POLICIES = {"oracle": _oracle, "noop": _noop, "cheat-expression": _cheat_expression,
                       "cheat-shotgun": _cheat_shotgun, "cheat-echo": _cheat_echo}
for _name, _policy in ARITHMETIC_POLICIES.items():
    _policy.__name__ = _policy.__qualname__ = _name  # recorded as the trajectory's model
