"""The agent loop: generate an action -> execute it in the environment -> feed the observation back,
until the environment says done or the step budget runs out; then the verifier judges the episode.

Many episodes run concurrently on one event loop (bounded by `concurrency`); environment calls run in
worker threads because sandboxes block. Every assistant turn keeps the token ids and logprobs the
server returned (vLLM's `return_token_ids` and `logprobs`) so RL trainers need not re-tokenize.

Deliberately not here: retries with backoff beyond the openai client's own, tool-call execution
(environments see the raw assistant text), and tracing (see the Langfuse integration).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Optional, Sequence

import openai

from . import _defaults
from ._env import Environment, StepResult, Verifier
from ._types import Message, Outcome, Step, Task, Trajectory, TurnTokens, new_id
from .errors import ConfigError, GenerationError

EnvFactory = Callable[[], Environment]


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters sent with every generate call."""

    temperature: float = _defaults.TEMPERATURE
    top_p: float = 1.0
    max_tokens: int = _defaults.MAX_TOKENS
    seed: Optional[int] = None
    """Per-episode seeds derive from this and the task id, so reruns sample the same way."""
    logprobs: bool = True
    return_token_ids: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Passed through to the server unchanged (e.g. vLLM's `top_k`)."""


@dataclass(frozen=True)
class _Ctx:
    client: openai.AsyncOpenAI
    model: str
    sampling: Sampling
    verifier: Optional[Verifier]
    app: str
    max_steps: int
    system_prompt: Optional[str]
    metadata: dict[str, Any]


async def _call_env(fn: Callable[..., Any], *args: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await asyncio.to_thread(fn, *args)


def _episode_seed(base: Optional[int], task_id: str, step: int) -> Optional[int]:
    if base is None:
        return None
    # Stable across processes (unlike hash()): a rerun of the same tasks samples identically.
    h = 0
    for ch in f"{task_id}:{step}":
        h = (h * 131 + ord(ch)) % 2_147_483_647
    return (base * 1_000_003 + h) % 2_147_483_647


async def _generate(ctx: _Ctx, messages: list[Message], seed: Optional[int]) -> tuple[str, Optional[str], TurnTokens]:
    extra: dict[str, Any] = dict(ctx.sampling.extra_body)
    if ctx.sampling.return_token_ids:
        extra["return_token_ids"] = True
    kwargs: dict[str, Any] = {}
    if seed is not None:
        kwargs["seed"] = seed
    try:
        resp = await ctx.client.chat.completions.create(
            model=ctx.model,
            messages=[m.model_dump(exclude_none=True) for m in messages],  # type: ignore[misc]
            temperature=ctx.sampling.temperature,
            top_p=ctx.sampling.top_p,
            max_tokens=ctx.sampling.max_tokens,
            logprobs=ctx.sampling.logprobs or None,
            extra_body=extra or None,
            **kwargs,
        )
    except openai.NotFoundError as e:
        raise GenerationError(f"model {ctx.model!r} is not served here: {e.message}") from e
    choice = resp.choices[0]
    extra_resp = resp.model_extra or {}
    extra_choice = choice.model_extra or {}
    logprobs = None
    if choice.logprobs is not None and choice.logprobs.content is not None:
        logprobs = [t.logprob for t in choice.logprobs.content]
    turn = TurnTokens(
        message_index=len(messages),
        prompt_token_ids=extra_resp.get("prompt_token_ids"),
        completion_token_ids=extra_choice.get("token_ids"),
        completion_logprobs=logprobs,
        finish_reason=choice.finish_reason,
    )
    return choice.message.content or "", resp.model, turn


async def _episode(ctx: _Ctx, task: Task, env: Environment) -> Trajectory:
    started = datetime.now(timezone.utc)
    messages: list[Message] = []
    if ctx.system_prompt:
        messages.append(Message(role="system", content=ctx.system_prompt))
    observation = await _call_env(env.reset, task)
    messages.append(Message(role="user", content=observation))
    turns: list[TurnTokens] = []
    steps: list[Step] = []
    served: Optional[str] = None
    meta = dict(ctx.metadata)
    for i in range(ctx.max_steps):
        t0 = time.perf_counter()
        action, served_now, turn = await _generate(ctx, messages, _episode_seed(ctx.sampling.seed, task.id, i))
        served = served or served_now
        t1 = time.perf_counter()
        messages.append(Message(role="assistant", content=action))
        turns.append(turn)
        try:
            res: StepResult = await _call_env(env.step, action)
        except Exception:  # the environment crashed: record it, keep the other episodes running
            meta["env_error"] = traceback.format_exc(limit=8)
            steps.append(Step(index=i, action=action, observation="", generate_seconds=t1 - t0,
                              execute_seconds=time.perf_counter() - t1, done=True, info={"error": True}))
            break
        t2 = time.perf_counter()
        steps.append(Step(index=i, action=action, observation=res.observation, reward=res.reward, done=res.done,
                          info=res.info, generate_seconds=t1 - t0, execute_seconds=t2 - t1))
        if res.done:
            break
        messages.append(Message(role="user", content=res.observation))
    traj = Trajectory(
        id=new_id(), app=ctx.app, task_id=task.id, model=ctx.model, served_version=served, messages=messages,
        turns=turns, steps=steps, metadata=meta, started_at=started, finished_at=datetime.now(timezone.utc),
    )
    traj.outcome = _judge(ctx.verifier, task, traj)
    return traj


def _judge(verifier: Optional[Verifier], task: Task, traj: Trajectory) -> Outcome:
    if verifier is None:
        # Without a verifier the environment's last reward is the outcome.
        reward = traj.steps[-1].reward if traj.steps else 0.0
        return Outcome(success=reward > 0 and bool(traj.steps and traj.steps[-1].done), reward=reward)
    try:
        return verifier.verify(task, traj)
    except Exception as e:  # a crashing verifier is recorded as a crash, never silently as reward 0
        return Outcome(success=False, reward=0.0, error=f"{type(e).__name__}: {e}",
                       details={"traceback": traceback.format_exc(limit=8)})


def _client(base_url: Optional[str], api_key: Optional[str], timeout: float) -> openai.AsyncOpenAI:
    url = base_url or os.environ.get("LOOPLIFT_BASE_URL") or _defaults.GATEWAY_URL
    key = api_key or os.environ.get("LOOPLIFT_API_KEY") or "looplift-no-key"
    return openai.AsyncOpenAI(base_url=url, api_key=key, timeout=timeout, max_retries=2)


async def arun(
    tasks: Sequence[Task],
    env_factory: EnvFactory,
    *,
    model: str = _defaults.MODEL,
    verifier: Optional[Verifier] = None,
    collector: Optional[Any] = None,
    app: str = "default",
    base_url: Optional[str] = None,
    api_key: Optional[str] = None,
    max_steps: int = _defaults.MAX_STEPS,
    concurrency: int = _defaults.CONCURRENCY,
    sampling: Sampling = Sampling(),
    system_prompt: Optional[str] = None,
    metadata: Optional[dict[str, Any]] = None,
    on_episode: Optional[Callable[[Trajectory], Any]] = None,
    client: Optional[openai.AsyncOpenAI] = None,
    timeout: float = _defaults.REQUEST_TIMEOUT_S,
) -> list[Trajectory]:
    """Run one episode per task, `concurrency` at a time; return the trajectories in task order.

    `env_factory()` makes a fresh environment per episode. `collector` (a `CollectorClient`) receives
    every finished trajectory; it never blocks or raises when the collector is down. `on_episode` is
    called after each episode (e.g. to advance a progress bar). `base_url` defaults to
    `$LOOPLIFT_BASE_URL`, then the local gateway (http://127.0.0.1:8000/v1).
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
    if max_steps < 1:
        raise ConfigError(f"max_steps must be >= 1, got {max_steps}")
    own_client = client is None
    ctx = _Ctx(client=client or _client(base_url, api_key, timeout), model=model, sampling=sampling,
               verifier=verifier, app=app, max_steps=max_steps, system_prompt=system_prompt,
               metadata=dict(metadata or {}))
    sem = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Trajectory:
        async with sem:
            env = env_factory()
            try:
                traj = await _episode(ctx, task, env)
            finally:
                close = getattr(env, "close", None)
                if close is not None:
                    await _call_env(close)
        if collector is not None:
            collector.submit(traj)
        if on_episode is not None:
            result = on_episode(traj)
            if isinstance(result, Awaitable):
                await result
        return traj

    try:
        return list(await asyncio.gather(*(one(t) for t in tasks)))
    finally:
        if own_client:
            await ctx.client.close()


def run(tasks: Sequence[Task], env_factory: EnvFactory, **kwargs: Any) -> list[Trajectory]:
    """Synchronous `arun` for scripts. Inside a running event loop, `await sdk.arun(...)` instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun(tasks, env_factory, **kwargs))
    raise ConfigError("sdk.run() was called inside a running event loop; use `await sdk.arun(...)` instead")
