"""The demo task's eval suite, `envs.arithmetic_suite(n)`, what `looplift demo` gates on, and the task as a family.

It is an ordinary `sdk.EvalSuite` — nothing in the trainer knows about arithmetic — passed as
`--eval envs:arithmetic_suite` (a zero-argument call gives the 100-task held-out set). The
environment needs sandboxes: give it a `pool`, or it starts its own on the first episode and closes it
at interpreter exit or on `suite.env_factory.close()`. That pool is Docker, never a silent fallback to
the local backend, which sees the host (a gate must not be passable by reading the host's files):
`backend="local"`, or `$LOOPLIFT_SANDBOX=local` with `$LOOPLIFT_SANDBOX_UNSAFE=1`, asks for it (`_pools`).
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING, Optional

from sdk import Budget, EnvFamily, EvalSuite, Sampling, Task

from ._arithmetic import ARITHMETIC_POLICIES, ArithmeticEnv, ArithmeticVerifier, held_out_tasks, training_tasks
from ._pools import family_backend, family_pool_size, start_family_pool

from sandboxes import SandboxConfig

if TYPE_CHECKING:
    from sandboxes import SandboxPool

#: The demo's budget and sampling: code, read the output, answer (4 turns); short replies.
BUDGET = Budget(max_steps=4)
SAMPLING = Sampling(max_tokens=64, seed=0)


class _PooledEnvs:
    """An env factory over a sandbox pool, started on first use when none was given."""

    def __init__(self, pool: "Optional[SandboxPool]", backend: Optional[str], size: Optional[int] = None) -> None:
        self._pool, self._own = pool, pool is None
        self._backend, self._size = backend, size
        self._lock = threading.Lock()

    def __call__(self) -> ArithmeticEnv:
        with self._lock:
            if self._pool is None:
                self._pool = start_family_pool(self._backend, SandboxConfig(), family_pool_size(self._size))
                atexit.register(self.close)
        return ArithmeticEnv(pool=self._pool)

    def close(self) -> None:
        """Close the pool this factory started (a pool it was given belongs to the caller)."""
        with self._lock:
            pool, self._pool = (self._pool, None) if self._own else (None, self._pool)
        if pool is not None:
            pool.close()


def arithmetic_suite(n: int = 100, *, pool: "Optional[SandboxPool]" = None,
                     backend: Optional[str] = None) -> EvalSuite:
    """The demo task's first `n` held-out problems (never trained on) as an eval suite."""
    env_factory = _PooledEnvs(pool, family_backend(backend) if pool is None else None)
    return EvalSuite(name=f"arithmetic-held-out-{n}", tasks=held_out_tasks(n), env_factory=env_factory,
                     verifier=ArithmeticVerifier(), budget=BUDGET, sampling=SAMPLING)


def _tasks(split: str, n: Optional[int], seed: int) -> list[Task]:
    if split == "held_out":  # the fixed 100 (training excludes exactly these)
        return held_out_tasks(100 if n is None else min(n, 100))
    if split == "train":
        return training_tasks(1000 if n is None else n, seed)
    raise ValueError(f"unknown split {split!r}; use one of: train, held_out")


def family(*, backend: Optional[str] = None, pool_size: Optional[int] = None) -> EnvFamily:
    """The demo task as an `sdk.EnvFamily` (the demo's eval suite's budget, sampling and sandbox pool, made on
    first use; `backend` and `pool_size` default to `$LOOPLIFT_SANDBOX` / `$LOOPLIFT_SANDBOX_POOL`, then
    Docker (no fallback) and 2)."""
    factory = _PooledEnvs(None, family_backend(backend), pool_size)
    return EnvFamily(
        name="arithmetic",
        description="Compute an integer expression by writing Python, reading the output, and answering 'Answer: N'.",
        tasks=_tasks, env_factory=factory, verifier=ArithmeticVerifier(), policies=dict(ARITHMETIC_POLICIES),
        budget=BUDGET, sampling=SAMPLING, close=factory.close,
    )
