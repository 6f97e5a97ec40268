"""The agent loop: generate an action -> execute it in the environment -> feed the observation back,
until the environment says done or a budget (turns, completion tokens, wall time) runs out; then the
verifier judges the episode.

Tools, OpenAI's format end to end: when the environment exposes `tools`, they are sent with every
request; each tool call of an assistant message is executed by `env.step_tool(call)` as one `Step`, and
its observation goes back as a `tool` message with the call's id. A turn without tool calls goes to
`env.step(text)`. Every assistant turn keeps the token ids and logprobs the server returned (vLLM's
`return_token_ids` and `logprobs`) so RL trainers need not re-tokenize, and the sampling parameters it was
generated with (`TurnTokens.sampling`: the `Sampling` sent, `extra_body` included, with the server's defaults
for the rest when a looplift gateway names its generation config), so they can tell on-policy logprobs.
Every request of an episode carries `X-Looplift-Session: <trajectory id>`, so a gateway canary serves the
whole episode from one version.

Many episodes run concurrently on one event loop (bounded by `concurrency`); environment calls run in
worker threads because sandboxes block. With `policy=` a function writes the assistant messages instead
of a model (reference policies, tests); everything else is the same loop.

Deliberately not here: retries beyond the openai client's own, and tracing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Optional, Sequence

import openai

from . import _defaults, wire
from ._env import Environment, StepResult, Verifier
from ._types import (EndReason, Message, Outcome, SamplingRecord, Step, Task, ToolCall, ToolCallFunction, Trajectory,
                     TurnTokens, new_id)
from .errors import ConfigError, GenerationError

if TYPE_CHECKING:
    from ._suite import Budget, Policy, ToolChoice

EnvFactory = Callable[[], Environment]
_NOT_RUN = "not executed: the episode ended before this tool call"


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters sent with every generate call."""

    temperature: float = _defaults.TEMPERATURE
    top_p: float = 1.0
    max_tokens: int = _defaults.MAX_TOKENS
    """Per turn; a `Budget.max_tokens` lowers it to what the episode has left."""
    seed: Optional[int] = None
    """Per-episode seeds derive from this and the task id, so reruns sample the same way."""
    logprobs: bool = True
    return_token_ids: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Passed through to the server unchanged (e.g. vLLM's `top_k`)."""


@dataclass(frozen=True)
class _Ctx:
    client: Optional[openai.AsyncOpenAI]
    policy: Optional["Policy"]
    model: str
    sampling: Sampling
    verifier: Optional[Verifier]
    app: str
    budget: "Budget"
    system_prompt: Optional[str]
    tool_choice: "ToolChoice"
    metadata: dict[str, Any]


class _EpisodeError(Exception):
    def __init__(self, reason: EndReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)
    return await result if inspect.isawaitable(result) else result


def _episode_seed(base: Optional[int], task_id: str, step: int) -> Optional[int]:
    if base is None:
        return None
    # Stable across processes (unlike hash()): a rerun of the same tasks samples identically.
    h = 0
    for ch in f"{task_id}:{step}":
        h = (h * 131 + ord(ch)) % 2_147_483_647
    return (base * 1_000_003 + h) % 2_147_483_647


def _tools_of(env: Environment) -> list[dict[str, Any]]:
    tools = getattr(env, "tools", None)
    if callable(tools):
        tools = tools()
    return list(tools or [])


async def _generate(ctx: _Ctx, task: Task, messages: list[Message], seed: Optional[int], tools: list[dict[str, Any]],
                    max_tokens: int, session: str) -> tuple[Message, Optional[str], Optional[tuple[TurnTokens, int]]]:
    """The next assistant message: from the policy, or from the model with its token ids and logprobs.
    `session` (the trajectory id) goes as `X-Looplift-Session`, so a gateway canary keeps the episode on one version."""
    if ctx.policy is not None:
        try:
            reply = await _call(ctx.policy, task, [m.model_copy(deep=True) for m in messages])
            msg = Message(role="assistant", content=reply) if isinstance(reply, str) else Message.model_validate(reply)
        except Exception as e:  # noqa: BLE001 - recorded on the trajectory, the other episodes go on
            raise _EpisodeError("policy_error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}") from None
        if msg.role != "assistant":
            raise _EpisodeError("policy_error", f"the policy returned a {msg.role!r} message, not an assistant one")
        return msg, None, None
    assert ctx.client is not None
    extra: dict[str, Any] = dict(ctx.sampling.extra_body)
    if ctx.sampling.return_token_ids:
        extra["return_token_ids"] = True
    kwargs: dict[str, Any] = {}
    if seed is not None:
        kwargs["seed"] = seed
    if tools:
        kwargs["tools"] = tools
        if ctx.tool_choice is not None:
            kwargs["tool_choice"] = ctx.tool_choice
    # What the request asks of the sampler, as the server reads the body (`extra_body` is merged into it).
    asked = {"temperature": ctx.sampling.temperature, "top_p": ctx.sampling.top_p, **ctx.sampling.extra_body, **kwargs}
    try:
        raw = await ctx.client.chat.completions.with_raw_response.create(
            model=ctx.model,
            messages=[m.model_dump(exclude_none=True) for m in messages],  # type: ignore[misc]
            temperature=ctx.sampling.temperature, top_p=ctx.sampling.top_p, max_tokens=max_tokens,
            logprobs=ctx.sampling.logprobs or None, extra_body=extra or None,
            extra_headers={wire.SESSION_HEADER: session}, **kwargs,
        )
        resp = raw.parse()
    except openai.NotFoundError as e:
        raise GenerationError(f"model {ctx.model!r} is not served here: {e.message}") from e
    except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
        raise GenerationError(f"the model server refused this client ({e.message}); set api_key= or "
                              "$LOOPLIFT_API_KEY to a key the gateway accepts") from e
    except openai.APIError as e:  # a 5xx after the client's retries, a 400 for this conversation, a timeout
        raise _EpisodeError("generation_error", f"{type(e).__name__}: {e}") from None
    choice = resp.choices[0]
    extra_resp, extra_choice = resp.model_extra or {}, choice.model_extra or {}
    logprobs = None
    if choice.logprobs is not None and choice.logprobs.content is not None:
        logprobs = [t.logprob for t in choice.logprobs.content]
    calls = []
    for c in choice.message.tool_calls or []:
        fn = getattr(c, "function", None)  # custom (non-function) tool calls carry no function: not ours to run
        if fn is not None:
            calls.append(ToolCall(id=c.id, function=ToolCallFunction(name=fn.name, arguments=fn.arguments)))
    msg = Message(role="assistant", content=choice.message.content, tool_calls=calls or None)
    completion_ids = extra_choice.get("token_ids")
    # A looplift gateway says which defaults its vLLM filled in for what `asked` left out; another server does not.
    sampling = SamplingRecord.from_request(asked, raw.headers.get(wire.GENERATION_CONFIG_HEADER))
    turn = TurnTokens(message_index=len(messages), prompt_token_ids=extra_resp.get("prompt_token_ids"),
                      completion_token_ids=completion_ids, completion_logprobs=logprobs,
                      finish_reason=choice.finish_reason, sampling=sampling)
    used = resp.usage.completion_tokens if resp.usage is not None else len(completion_ids or logprobs or [])
    return msg, resp.model, (turn, used)


class _Episode:
    """One episode's state: messages, steps, turns, and the budget left."""

    def __init__(self, ctx: _Ctx, task: Task, env: Environment) -> None:
        self.ctx, self.task, self.env = ctx, task, env
        self.messages: list[Message] = []
        self.turns: list[TurnTokens] = []
        self.steps: list[Step] = []
        self.meta = dict(ctx.metadata)
        self.served: Optional[str] = None
        self.id = new_id()
        self.tokens = 0
        self.t0 = time.monotonic()

    def _left_s(self) -> Optional[float]:
        b = self.ctx.budget.max_seconds
        return None if b is None else b - (time.monotonic() - self.t0)

    async def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        left = self._left_s()
        if left is None:
            return await _call(fn, *args)
        return await asyncio.wait_for(_call(fn, *args), timeout=max(left, 0.001))

    async def run(self) -> Trajectory:
        started = datetime.now(timezone.utc)
        reason: EndReason = "max_steps"
        try:
            reason = await self._loop()
        except _EpisodeError as e:
            reason = e.reason
            self.meta[f"{e.reason}"] = str(e)[:4000]
        traj = Trajectory(
            id=self.id, app=self.ctx.app, task_id=self.task.id, model=self.ctx.model, served_version=self.served,
            messages=self.messages, turns=self.turns, steps=self.steps, metadata=self.meta, started_at=started,
            finished_at=datetime.now(timezone.utc), end_reason=reason,
        )
        # In a worker thread: verifiers block (a sandboxed test run), and the other episodes must go on meanwhile.
        traj.outcome = await _call(_judge, self.ctx.verifier, self.task, traj)
        return traj

    async def _loop(self) -> EndReason:
        ctx = self.ctx
        if ctx.system_prompt:
            self.messages.append(Message(role="system", content=ctx.system_prompt))
        try:
            first = await self._timed(self.env.reset, self.task)
        except asyncio.TimeoutError:
            return "max_seconds"
        except Exception:  # noqa: BLE001 - the environment crashed: recorded, the other episodes go on
            self.meta["env_error"] = traceback.format_exc(limit=8)
            return "env_error"
        self.messages.append(Message(role="user", content=first))
        tools = _tools_of(self.env)
        if tools:  # what the model was given: SFT renders the same tools into the prompt it trains on
            self.meta.setdefault("tools", tools)
        for turn_no in range(ctx.budget.max_steps):
            left = self._left_s()
            if left is not None and left <= 0:
                return "max_seconds"
            max_tokens = ctx.sampling.max_tokens
            if ctx.budget.max_tokens is not None:
                if self.tokens >= ctx.budget.max_tokens:
                    return "max_tokens"
                max_tokens = min(max_tokens, ctx.budget.max_tokens - self.tokens)
            t0 = time.perf_counter()
            try:
                msg, served, turn = await self._timed(
                    _generate, ctx, self.task, self.messages, _episode_seed(ctx.sampling.seed, self.task.id, turn_no),
                    tools, max_tokens, self.id)
            except asyncio.TimeoutError:
                return "max_seconds"
            gen_s = time.perf_counter() - t0
            self.served = self.served or served
            if turn is not None:
                self.turns.append(turn[0])
                self.tokens += turn[1]
            self.messages.append(msg)
            end = await (self._run_tools(msg.tool_calls, gen_s) if msg.tool_calls else self._run_text(msg, gen_s))
            if end is not None:
                return end
        return "max_steps"

    async def _execute(self, fn: Callable[..., Any], arg: Any, action: str, gen_s: float,
                       call: Optional[ToolCall]) -> tuple[Optional[StepResult], Optional[EndReason]]:
        t1 = time.perf_counter()
        try:
            res: StepResult = await self._timed(fn, arg)
        except asyncio.TimeoutError:
            self.steps.append(Step(index=len(self.steps), action=action, observation="", tool_call=call, done=True,
                                   info={"timeout": True}, generate_seconds=gen_s,
                                   execute_seconds=time.perf_counter() - t1))
            return None, "max_seconds"
        except Exception:  # noqa: BLE001 - the environment crashed: record it, keep the other episodes running
            self.meta["env_error"] = traceback.format_exc(limit=8)
            self.steps.append(Step(index=len(self.steps), action=action, observation="", tool_call=call, done=True,
                                   info={"error": True}, generate_seconds=gen_s,
                                   execute_seconds=time.perf_counter() - t1))
            return None, "env_error"
        self.steps.append(Step(index=len(self.steps), action=action, observation=res.observation, reward=res.reward,
                               done=res.done, info=res.info, tool_call=call, generate_seconds=gen_s,
                               execute_seconds=time.perf_counter() - t1))
        return res, ("done" if res.done else None)

    async def _run_text(self, msg: Message, gen_s: float) -> Optional[EndReason]:
        action = msg.content or ""
        res, end = await self._execute(self.env.step, action, action, gen_s, None)
        if res is not None and end is None:
            self.messages.append(Message(role="user", content=res.observation))
        return end

    async def _run_tools(self, calls: list[ToolCall], gen_s: float) -> Optional[EndReason]:
        step_tool = getattr(self.env, "step_tool", None)
        end: Optional[EndReason] = None
        for i, call in enumerate(calls):
            if end is not None:  # every call gets its tool message, so the conversation stays valid OpenAI
                self.messages.append(Message(role="tool", tool_call_id=call.id, content=_NOT_RUN))
                continue
            action = json.dumps({"name": call.function.name, "arguments": call.function.arguments}, ensure_ascii=False)
            if step_tool is None:
                observation = f"error: this environment has no tools; {call.function.name!r} was not run"
                self.steps.append(Step(index=len(self.steps), action=action, observation=observation,
                                       tool_call=call, generate_seconds=gen_s if i == 0 else 0.0))
            else:
                res, end = await self._execute(step_tool, call, action, gen_s if i == 0 else 0.0, call)
                observation = res.observation if res is not None else ""
            self.messages.append(Message(role="tool", tool_call_id=call.id, content=observation))
        return end


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


def _client(base_url: Optional[str], api_key: Optional[str], timeout: float,
            headers: Mapping[str, str]) -> openai.AsyncOpenAI:
    url = base_url or os.environ.get("LOOPLIFT_BASE_URL") or _defaults.GATEWAY_URL
    key = api_key or os.environ.get("LOOPLIFT_API_KEY") or "looplift-no-key"
    return openai.AsyncOpenAI(base_url=url, api_key=key, timeout=timeout, max_retries=2, default_headers=dict(headers))


def _budget(budget: Optional["Budget"], max_steps: Optional[int]) -> "Budget":
    from ._suite import Budget

    if budget is not None and max_steps is not None:
        raise ConfigError("pass either budget= or max_steps=, not both (max_steps is Budget(max_steps=...))")
    if budget is not None:
        return budget
    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"max_steps must be >= 1, got {max_steps}")
    return Budget(max_steps=max_steps or _defaults.MAX_STEPS)


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
    max_steps: Optional[int] = None,
    budget: Optional["Budget"] = None,
    concurrency: int = _defaults.CONCURRENCY,
    sampling: Sampling = Sampling(),
    system_prompt: Optional[str] = None,
    tool_choice: "ToolChoice" = None,
    metadata: Optional[dict[str, Any]] = None,
    on_episode: Optional[Callable[[Trajectory], Any]] = None,
    client: Optional[openai.AsyncOpenAI] = None,
    policy: Optional["Policy"] = None,
    timeout: float = _defaults.REQUEST_TIMEOUT_S,
    headers: Optional[Mapping[str, str]] = None,
) -> list[Trajectory]:
    """Run one episode per task, `concurrency` at a time; return the trajectories in task order.

    `env_factory()` makes a fresh environment per episode. `collector` (a `CollectorClient`) receives
    every finished trajectory; it never blocks or raises when the collector is down. `on_episode` is
    called after each episode (e.g. to advance a progress bar). `base_url` defaults to
    `$LOOPLIFT_BASE_URL`, then the local gateway (http://127.0.0.1:8000/v1). `budget` (or the shorthand
    `max_steps`) bounds each episode; `policy` replaces the model (no server is contacted then). `headers`
    are sent with every request, besides `X-Looplift-App: app`; with a `collector`, `X-Looplift-Capture: off`
    is added, so a gateway that captures traffic does not store a second, outcome-less copy of the episode the
    SDK records itself.
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
    limits = _budget(budget, max_steps)
    own_client = client is None and policy is None
    # A capturing gateway files the exchanges under `app` (HTTP header values are ASCII: other names are left out).
    hdrs = {**({wire.APP_HEADER: app} if app.isascii() and app.isprintable() else {}), **(headers or {})}
    if collector is not None:
        hdrs.setdefault(wire.CAPTURE_HEADER, wire.CAPTURE_OFF)
    if client is not None and hdrs:  # a caller's client gets them too (a copy sharing its connection pool)
        client = client.with_options(default_headers=hdrs)
    ctx = _Ctx(client=client or (None if policy is not None else _client(base_url, api_key, timeout, hdrs)),
               policy=policy,
               model=model if policy is None else getattr(policy, "__name__", "policy"), sampling=sampling,
               verifier=verifier, app=app, budget=limits, system_prompt=system_prompt, tool_choice=tool_choice,
               metadata=dict(metadata or {}))
    sem = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Trajectory:
        async with sem:
            env = env_factory()
            try:
                traj = await _Episode(ctx, task, env).run()
            finally:
                close = getattr(env, "close", None)
                if close is not None:
                    await _call(close)
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
        if own_client and ctx.client is not None:
            await ctx.client.close()


def run(tasks: Sequence[Task], env_factory: EnvFactory, **kwargs: Any) -> list[Trajectory]:
    """Synchronous `arun` for scripts. Inside a running event loop, `await sdk.arun(...)` instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun(tasks, env_factory, **kwargs))
    raise ConfigError("sdk.run() was called inside a running event loop; use `await sdk.arun(...)` instead")
