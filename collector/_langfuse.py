"""Export to Langfuse: every stored trajectory becomes a Langfuse trace, outcomes and feedback its scores.

Where it runs and why: in the collector, after anonymization. Every SDK episode and every exchange the
gateway captures reaches the collector as a trajectory, so one exporter covers both, and it reads the
rows `Store.add_trajectories` committed (their anonymized `data`) through `Store.listeners`: the text
that leaves the machine is exactly what was stored, never the raw text.

Off by default: on when Langfuse's own settings are in the environment (`LANGFUSE_PUBLIC_KEY`,
`LANGFUSE_SECRET_KEY`, `LANGFUSE_HOST`; see `CollectorSettings.langfuse`). It never blocks ingest:
the listener only puts the committed row on a bounded queue (`queue_size`); when the queue is full the
item is dropped and counted (`stats.dropped`), and a background thread turns queued items into Langfuse
data. The Langfuse SDK batches and sends them from its own threads.

The mapping (one trace per trajectory, its id derived from the trajectory id with
`Langfuse.create_trace_id(seed=...)`, so feedback arriving later scores the same trace):

| trajectory                          | Langfuse                                                              |
|-------------------------------------|-----------------------------------------------------------------------|
| the episode                         | trace `app`, root observation (agent): prompt in, last answer out     |
| each assistant message              | generation: model = served version, messages so far in, the message  |
|                                     | out, usage from the token ids, latency                                |
| each environment step               | span (named by the tool, or `step`): action in, observation out, reward, done, duration |
| outcome                             | scores `success` (boolean, verifier details as comment), `reward`     |
| the collector's final score         | score `looplift_score` (its source as comment)                        |
| feedback                            | scores `user_rating` (-1..1, text as comment), `user_correction`      |

Timestamps: an episode records durations, not when each turn ran, so the timeline is rebuilt from
`started_at` by laying generations and steps end to end (their durations are exact, their start times
approximate). To set those start times the exporter creates OpenTelemetry spans itself, on its own
`TracerProvider` to which the Langfuse SDK attaches its span processor (export, batching, auth), with
the attribute names the SDK publishes (`langfuse.LangfuseOtelSpanAttributes`); the SDK's
`start_observation` always starts "now". A custom OTel `IdGenerator` gives each root span the derived
trace id. Scores go through `Langfuse.create_score` with ids derived from the trajectory (re-exports
replace, not duplicate).

The SDK keeps one set of resources per public key for the life of the process, so the exporter keeps
one client per (public key, host) too and only flushes it on close (a collector restarted in the same
process reuses it). Test seams: `span_exporter` (an OTel in-memory exporter) and `httpx_client` (an
httpx `MockTransport`) are the SDK's own constructor arguments, used by the first exporter of a key.
Deliberately not here: cost figures, prompt management, media uploads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sdk import Message, Step, Trajectory

from . import _defaults
from ._settings import LangfuseSettings
from .errors import ConfigError

if TYPE_CHECKING:
    from ._store import Store

try:
    from langfuse import Langfuse, LangfuseOtelSpanAttributes
    from opentelemetry import trace as otel
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
except ImportError as _e:  # one line wherever the export is switched on without the extra
    raise ConfigError(f"the Langfuse export needs the langfuse package ({_e}): pip install 'looplift[langfuse]', "
                      f"or unset LANGFUSE_PUBLIC_KEY / set {_defaults.ENV_LANGFUSE_EXPORT}=off") from None

log = logging.getLogger("looplift.collector.langfuse")

#: Instrumentation scope of the exporter's spans.
TRACER_NAME = "looplift.collector"


@dataclass
class ExporterStats:
    """Counters since the exporter started (the dashboard and `/v1/dashboard/health` show them)."""

    enqueued: int = 0
    dropped: int = 0
    """Items not queued because the queue was full (ingest never waits)."""
    traces: int = 0
    scores: int = 0
    failed: int = 0
    """Items whose conversion raised (logged with the trajectory id)."""
    last_error: str | None = None


class _TraceIds(RandomIdGenerator):
    """An OTel `IdGenerator` that hands the next root span a chosen trace id (per thread), random otherwise."""

    def __init__(self) -> None:
        self._next = threading.local()

    def use(self, trace_id_hex: str) -> None:
        self._next.value = int(trace_id_hex, 16)

    def generate_trace_id(self) -> int:
        value = getattr(self._next, "value", None)
        self._next.value = None
        return value if value is not None else super().generate_trace_id()


@dataclass(frozen=True)
class _Client:
    langfuse: Any
    tracer: Any
    ids: _TraceIds


_CLIENTS: dict[tuple[str, str | None], _Client] = {}
_CLIENTS_LOCK = threading.Lock()


def langfuse_client(settings: LangfuseSettings, *, span_exporter: Any = None, httpx_client: Any = None) -> Any:
    """The process's Langfuse client for these settings (`langfuse.Langfuse`), made on first use."""
    return _client(settings, span_exporter, httpx_client).langfuse


def _client(settings: LangfuseSettings, span_exporter: Any, httpx_client: Any) -> _Client:
    key = (settings.public_key, settings.host)
    with _CLIENTS_LOCK:
        found = _CLIENTS.get(key)
        if found is not None:
            return found
        ids = _TraceIds()
        provider = TracerProvider(id_generator=ids)
        client = Langfuse(public_key=settings.public_key, secret_key=settings.secret_key.get_secret_value(),
                          host=settings.host, tracer_provider=provider, span_exporter=span_exporter,
                          httpx_client=httpx_client,
                          # The provider is the exporter's own: every span on it is meant for Langfuse.
                          should_export_span=lambda _span: True)
        made = _Client(client, provider.get_tracer(TRACER_NAME), ids)
        _CLIENTS[key] = made
        return made


def trace_id_for(trajectory_id: str) -> str:
    """The Langfuse trace id of a trajectory (32 hex characters, the same on every export)."""
    return str(Langfuse.create_trace_id(seed=trajectory_id))


def _score_id(trajectory_id: str, name: str) -> str:
    return hashlib.sha256(f"{trajectory_id}:{name}".encode()).hexdigest()[:32]


def _ns(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1e9)


class LangfuseExporter:
    """Queue committed rows, turn them into Langfuse traces and scores in a background thread.

    `attach(store)` subscribes to a `Store`; `start()` starts the thread; `flush()` waits until the queue is
    drained and the SDK delivered; `close()` stops the thread after a flush.
    """

    def __init__(self, settings: LangfuseSettings, *, span_exporter: Any = None, httpx_client: Any = None,
                 max_field_chars: int = _defaults.LANGFUSE_MAX_FIELD_CHARS) -> None:
        self.settings = settings
        self._c = _client(settings, span_exporter, httpx_client)
        self._attrs = _Attributes(max_field_chars)
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=settings.queue_size)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stores: list[Store] = []
        self.stats = ExporterStats()

    # -- producer side (the request thread): never blocks -----------------------------------------
    def attach(self, store: Store) -> None:
        """Export what `store` commits from now on (its trajectories and feedback), until `close()`."""
        store.listeners.append(self._on_store)
        self._stores.append(store)

    def _on_store(self, what: str, payload: Any) -> None:
        if what == "trajectories":
            for row in payload:
                self.submit("trajectory", row)
        elif what == "feedback":
            self.submit("feedback", payload)

    def submit(self, kind: str, item: dict[str, Any]) -> bool:
        """Queue one committed row (`trajectory`: a `trajectories` row dict with its anonymized `data`;
        `feedback`: a `feedback` row dict). False, counted in `stats.dropped`, when the queue is full."""
        with self._lock:
            try:
                self._queue.put_nowait((kind, item))
            except queue.Full:
                self.stats.dropped += 1
                if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                    log.warning("Langfuse export queue full (%d): %d items dropped so far", self.settings.queue_size,
                                self.stats.dropped)
                return False
            self._pending += 1
            self.stats.enqueued += 1
        return True

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> LangfuseExporter:
        """Start the background thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="looplift-langfuse", daemon=True)
            self._thread.start()
        return self

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued item was handed to the SDK, then flush the SDK; True if done in time."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout):
                return False
        done = threading.Event()

        def sdk_flush() -> None:
            try:
                self._c.langfuse.flush()
            finally:
                done.set()

        # The SDK's flush waits for delivery, which a Langfuse that is down can hold up: bounded here.
        threading.Thread(target=sdk_flush, name="looplift-langfuse-flush", daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Stop listening, flush (bounded by `timeout`), stop the thread. The SDK client stays for reuse in this process."""
        for store in self._stores:
            if self._on_store in store.listeners:
                store.listeners.remove(self._on_store)
        self._stores.clear()
        if self._thread is not None:
            self.flush(timeout)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def to_dict(self) -> dict[str, Any]:
        """Settings (no secret) and counters, for the dashboard."""
        return {"enabled": True, "host": self.settings.host or "Langfuse Cloud (SDK default)",
                "queue_size": self.settings.queue_size, "queued": self._queue.qsize(), **asdict(self.stats)}

    # -- consumer side ----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                kind, item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                if kind == "trajectory":
                    self._trajectory(item)
                else:
                    self._feedback(item)
            except Exception as e:  # one bad item must not stop the export of the others
                self.stats.failed += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"[:500]
                log.exception("Langfuse export of %s %s failed", kind, item.get("id") or item.get("trajectory_id"))
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _score(self, trace_id: str, tid: str, name: str, value: float, data_type: str, *,
               comment: str | None = None, at: datetime | None = None, key: str | None = None) -> None:
        self._c.langfuse.create_score(trace_id=trace_id, name=name, value=value, data_type=data_type,
                                      score_id=_score_id(tid, key or name), comment=comment, timestamp=at)
        self.stats.scores += 1

    def _trajectory(self, row: dict[str, Any]) -> None:
        traj = Trajectory.model_validate_json(row["data"])
        trace_id = trace_id_for(traj.id)
        _Trace(self._c, self._attrs, traj, trace_id).emit()
        self.stats.traces += 1
        at = traj.finished_at
        if traj.outcome is not None:
            o = traj.outcome
            details = {"details": o.details, **({"error": o.error} if o.error else {})}
            self._score(trace_id, traj.id, "success", 1.0 if o.success else 0.0, "BOOLEAN",
                        comment=self._attrs.cap(json.dumps(details, default=str)), at=at)
            self._score(trace_id, traj.id, "reward", float(o.reward), "NUMERIC", at=at)
        if row.get("score") is not None:
            self._score(trace_id, traj.id, "looplift_score", float(row["score"]), "NUMERIC",
                        comment=f"source: {row.get('score_source')}", at=at)

    def _feedback(self, fb: dict[str, Any]) -> None:
        tid = fb["trajectory_id"]
        trace_id = trace_id_for(tid)
        key = f"feedback:{fb['id']}"
        at = fb.get("created_at")
        if fb.get("rating") is not None:
            self._score(trace_id, tid, "user_rating", float(fb["rating"]), "NUMERIC",
                        comment=self._attrs.cap(fb["text"]) if fb.get("text") else None, at=at, key=key + ":rating")
        if fb.get("correction"):
            self._score(trace_id, tid, "user_correction", 1.0, "BOOLEAN", comment=self._attrs.cap(fb["correction"]),
                        at=at, key=key + ":correction")


class _Attributes:
    """Langfuse's OTel attributes (names from `langfuse.LangfuseOtelSpanAttributes`, values JSON like the SDK's)."""

    def __init__(self, max_chars: int) -> None:
        self.A = LangfuseOtelSpanAttributes
        self.max_chars = max_chars

    def cap(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        return text[: self.max_chars] + f"... [cut by looplift: {len(text) - self.max_chars} more characters]"

    def value(self, obj: Any) -> str:
        return self.cap(obj if isinstance(obj, str) else json.dumps(obj, default=str, ensure_ascii=False))

    def observation(self, kind: str, *, input: Any = None, output: Any = None, metadata: dict[str, Any] | None = None,
                    version: str | None = None, level: str | None = None) -> dict[str, Any]:
        A = self.A
        out: dict[str, Any] = {A.OBSERVATION_TYPE: kind}
        if input is not None:
            out[A.OBSERVATION_INPUT] = self.value(input)
        if output is not None:
            out[A.OBSERVATION_OUTPUT] = self.value(output)
        if version:
            out[A.VERSION] = version
        if level:
            out[A.OBSERVATION_LEVEL] = level
        out.update(self.metadata(A.OBSERVATION_METADATA, metadata))
        return out

    def metadata(self, prefix: str, metadata: dict[str, Any] | None) -> dict[str, str]:
        return {f"{prefix}.{k}": self.cap(json.dumps(v, default=str, ensure_ascii=False, separators=(",", ":")))
                for k, v in (metadata or {}).items() if v is not None}


def _msg(m: Message) -> dict[str, Any]:
    return m.model_dump(mode="json", exclude_none=True)


class _Trace:
    """The spans of one trajectory, laid end to end from `started_at` (see the module docstring)."""

    def __init__(self, client: _Client, attrs: _Attributes, traj: Trajectory, trace_id: str) -> None:
        self.c, self.a, self.t, self.trace_id = client, attrs, traj, trace_id

    def _steps_by_message(self) -> dict[int, list[Step]]:
        """Each assistant message's steps: tool calls by their call id, text turns in order."""
        by_call = {s.tool_call.id: s for s in self.t.steps if s.tool_call is not None}
        text_steps = iter([s for s in self.t.steps if s.tool_call is None])
        out: dict[int, list[Step]] = {}
        for i, m in enumerate(self.t.messages):
            if m.role != "assistant":
                continue
            if m.tool_calls:
                out[i] = [by_call[c.id] for c in m.tool_calls if c.id in by_call]
            else:
                step = next(text_steps, None)
                out[i] = [step] if step is not None else []
        return out

    def emit(self) -> None:
        t, A = self.t, self.a.A
        start = _ns(t.started_at)
        ms = t.messages
        first = next((i for i, m in enumerate(ms) if m.role == "assistant"), len(ms))
        last_answer = next((m for m in reversed(ms) if m.role == "assistant"), None)
        meta = {"trajectory_id": t.id, "task_id": t.task_id, "requested_model": t.model,
                "served_version": t.served_version, "end_reason": t.end_reason, "schema_version": t.schema_version,
                "steps": len(t.steps), "metadata": t.metadata or None}
        root_attrs = self.a.observation("agent", input=[_msg(m) for m in ms[:first]],
                                        output=_msg(last_answer) if last_answer else None, metadata=meta,
                                        version=t.served_version)
        root_attrs[A.TRACE_NAME] = t.app
        root_attrs[A.TRACE_TAGS] = [x for x in ("looplift", t.app, t.served_version) if x]
        root_attrs.update(self.a.metadata(A.TRACE_METADATA, meta))
        for attr, key in ((A.TRACE_USER_ID, "user_id"), (A.TRACE_SESSION_ID, "session_id")):
            if isinstance(t.metadata.get(key), str):
                root_attrs[attr] = t.metadata[key]
        self.c.ids.use(self.trace_id)
        root = self.c.tracer.start_span(f"{t.app}: {t.task_id}", start_time=start, attributes=root_attrs)
        ctx = otel.set_span_in_context(root)
        turns = {turn.message_index: turn for turn in t.turns}
        steps = self._steps_by_message()
        assistant = [i for i, m in enumerate(ms) if m.role == "assistant"]
        # Without steps (a captured exchange) the generations share the episode's wall time.
        share = ((_ns(t.finished_at) - start) // max(len(assistant), 1)) if not t.steps else 0
        cursor = start
        for i in assistant:
            its = steps.get(i, [])
            gen_ns = int(its[0].generate_seconds * 1e9) if its else share
            cursor = self._generation(ctx, i, turns.get(i), cursor, gen_ns)
            for step in its:
                cursor = self._step(ctx, step, cursor)
        root.end(end_time=max(_ns(t.finished_at), cursor))

    def _generation(self, ctx: Any, i: int, turn: Any, start: int, duration: int) -> int:
        t, A = self.t, self.a.A
        usage = None
        if turn is not None and turn.completion_token_ids is not None:
            usage = {"input": len(turn.prompt_token_ids or []), "output": len(turn.completion_token_ids)}
            usage["total"] = usage["input"] + usage["output"]
        attrs = self.a.observation("generation", input=[_msg(m) for m in t.messages[:i]], output=_msg(t.messages[i]),
                                   metadata={"message_index": i, "requested_model": t.model,
                                             "finish_reason": turn.finish_reason if turn else None},
                                   version=t.served_version)
        attrs[A.OBSERVATION_MODEL] = t.served_version or t.model
        if usage is not None:
            attrs[A.OBSERVATION_USAGE_DETAILS] = json.dumps(usage)
        span = self.c.tracer.start_span(f"generation {i}", context=ctx, start_time=start, attributes=attrs)
        span.end(end_time=start + duration)
        return start + duration

    def _step(self, ctx: Any, step: Step, start: int) -> int:
        failed = bool(step.info.get("error") or step.info.get("timeout"))
        attrs = self.a.observation(
            "span", input=step.action, output=step.observation, level="ERROR" if failed else None,
            metadata={"index": step.index, "reward": step.reward, "done": step.done, "info": step.info or None,
                      "execute_seconds": step.execute_seconds,
                      "tool_call": step.tool_call.model_dump(mode="json") if step.tool_call else None})
        name = step.tool_call.function.name if step.tool_call else "step"
        duration = int(step.execute_seconds * 1e9)
        span = self.c.tracer.start_span(f"{name} {step.index}", context=ctx, start_time=start, attributes=attrs)
        span.end(end_time=start + duration)
        return start + duration
