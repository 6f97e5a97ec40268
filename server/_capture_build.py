"""Turn one captured exchange (the request's fields, vLLM's answer bytes) into a trajectory.

Runs on the capture worker thread (`_capture`), never on the request path: the proxy only keeps the bytes
it relayed anyway. Two steps:

1. **The answer**: a JSON body (`parse_json_answer`) or the SSE stream's chunks (`parse_sse_answer`, which
   merges content and tool-call deltas by index) become one `Reply`: the assistant message (tool calls
   included), finish reason, usage, the completion's `id`, and the token ids and logprobs when vLLM
   returned them (`return_token_ids`, `logprobs`). With `n > 1` the first choice is the reply and the
   others are kept in the metadata as `alternatives`.
2. **The trajectory** (`SessionBook.trajectory`): the request's messages plus the reply; the reply's turn
   records the request's sampling parameters (`TurnTokens.sampling`), with the defaults vLLM filled in for the
   ones it left out when the gateway's vLLM runs `--generation-config vllm`
   (`GatewaySettings.generation_config`). Exchanges with the same `X-Looplift-Session` (and API key and app)
   are one conversation: since an OpenAI client re-sends the whole history with every request, the newest
   exchange's messages already hold every turn, and the trajectory is re-sent under the same id after each
   exchange with `metadata.looplift_revision` set to its message count; the collector keeps the longest
   (`collector._capture_rows`). The book remembers each session's earlier turns so the token ids and logprobs
   of every assistant turn, not only the last, reach the collector. A request whose history does not extend
   the session's conversation (the user started over) starts a new trajectory: the id hashes the session with
   the conversation's opening messages. A gateway restart forgets the book: the next exchange still replaces
   the stored trajectory (same id, more messages), only the token ids of the turns before the restart are
   missing from it.

Without a session header each exchange is its own trajectory, its id derived from the completion's id.
The task id is `X-Looplift-Task`, else a hash of the opening messages (so identical prompts group for
DPO pairs and GRPO groups at export). Content parts other than text (images, audio) are replaced by a
`[type]` placeholder; roles the trajectory contract does not have are mapped (`developer` -> `system`,
`function` -> `tool`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from sdk import Message, SamplingRecord, ToolCall, ToolCallFunction, Trajectory, TurnTokens
from sdk import wire

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
          "function": "tool"}


@dataclass
class Reply:
    """The assistant's answer of one exchange, as the client received it."""

    message: Message
    response_id: Optional[str] = None
    finish_reason: Optional[str] = None
    usage: Optional[dict[str, Any]] = None
    prompt_token_ids: Optional[list[int]] = None
    token_ids: Optional[list[int]] = None
    logprobs: Optional[list[float]] = None
    alternatives: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Exchange:
    """What the proxy hands the worker: the parsed request, the answer bytes, and who/what/when."""

    fields: dict[str, Any]
    model: str
    version: str
    key_id: Optional[str]
    app: Optional[str]
    session: Optional[str]
    task: Optional[str]
    started_at: float
    stream: bool
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    latency_s: float = 0.0
    #: Queued by `Capture.seal` before the answer's last bytes went out (`finish` then leaves it).
    sealed: bool = False
    #: Called by the capture worker once the exchange's trajectory is journaled (or could not be built).
    on_journaled: Optional[Callable[[], object]] = None


# ---- the answer ----------------------------------------------------------------------------------
def _tool_calls(raw: Any) -> Optional[list[ToolCall]]:
    calls = []
    for i, c in enumerate(raw or []):
        fn = c.get("function") or {}
        args = fn.get("arguments")
        calls.append(ToolCall(id=str(c.get("id") or f"call_{i}"), function=ToolCallFunction(
            name=str(fn.get("name") or ""), arguments=args if isinstance(args, str) else json.dumps(args or {}))))
    return calls or None


def _choice_message(msg: dict[str, Any]) -> Message:
    return Message(role="assistant", content=msg.get("content"), tool_calls=_tool_calls(msg.get("tool_calls")))


def _logprobs(lp: Any) -> Optional[list[float]]:
    content = (lp or {}).get("content") if isinstance(lp, dict) else None
    return [float(x["logprob"]) for x in content] if content else None


def parse_json_answer(body: bytes) -> Reply:
    """The `Reply` of a non-streamed chat completion."""
    data = json.loads(body)
    choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
    if not choices:
        raise ValueError("the answer has no choices")
    first = choices[0]
    return Reply(
        message=_choice_message(first.get("message") or {}), response_id=data.get("id"),
        finish_reason=first.get("finish_reason"), usage=data.get("usage"),
        prompt_token_ids=data.get("prompt_token_ids"), token_ids=first.get("token_ids"),
        logprobs=_logprobs(first.get("logprobs")),
        alternatives=[{"content": c.get("message", {}).get("content"), "tool_calls": c.get("message", {}).get("tool_calls"),
                       "finish_reason": c.get("finish_reason")} for c in choices[1:]],
    )


@dataclass
class _Acc:
    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: Optional[str] = None
    logprobs: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)

    def add(self, ch: dict[str, Any]) -> None:
        delta = ch.get("delta") or {}
        if delta.get("content"):
            self.content.append(delta["content"])
        for tc in delta.get("tool_calls") or []:
            call = self.calls.setdefault(int(tc.get("index", len(self.calls))), {"id": None, "name": "", "args": []})
            call["id"] = tc.get("id") or call["id"]
            fn = tc.get("function") or {}
            call["name"] += fn.get("name") or ""
            if fn.get("arguments"):
                call["args"].append(fn["arguments"])
        self.finish_reason = ch.get("finish_reason") or self.finish_reason
        self.logprobs += _logprobs(ch.get("logprobs")) or []
        self.token_ids += ch.get("token_ids") or []

    def message(self) -> dict[str, Any]:
        calls = [{"id": c["id"], "function": {"name": c["name"], "arguments": "".join(c["args"])}}
                 for _, c in sorted(self.calls.items())]
        return {"content": "".join(self.content) if self.content or not calls else None, "tool_calls": calls}


def parse_sse_answer(chunks: list[bytes]) -> Reply:
    """The `Reply` of a streamed chat completion, from the SSE bytes as relayed (chunk borders anywhere)."""
    text = b"".join(chunks).decode("utf-8")
    accs: dict[int, _Acc] = {}
    response_id = usage = prompt_ids = None
    for event in text.split("\n\n"):
        for line in event.split("\n"):
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if not payload or payload == "[DONE]":
                continue
            data = json.loads(payload)
            if "error" in data and "choices" not in data:
                raise ValueError("the stream ended with an error")
            response_id = response_id or data.get("id")
            usage = data.get("usage") or usage
            prompt_ids = prompt_ids or data.get("prompt_token_ids")
            for ch in data.get("choices") or []:
                accs.setdefault(int(ch.get("index", 0)), _Acc()).add(ch)
    if not accs:
        raise ValueError("the stream has no choices")
    ordered = [accs[i] for i in sorted(accs)]
    first = ordered[0]
    return Reply(message=_choice_message(first.message()), response_id=response_id, finish_reason=first.finish_reason,
                 usage=usage, prompt_token_ids=prompt_ids, token_ids=first.token_ids or None,
                 logprobs=first.logprobs or None,
                 alternatives=[{**a.message(), "finish_reason": a.finish_reason} for a in ordered[1:]])


# ---- the request ---------------------------------------------------------------------------------
def _text(content: Any) -> Optional[str]:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        out = []
        for part in content:
            if isinstance(part, dict):
                kind = part.get("type")
                out.append(str(part.get("text", "")) if kind == "text" else f"[{kind}]")
            else:
                out.append(str(part))
        return "".join(out)
    return json.dumps(content)


def request_messages(raw: Any) -> list[Message]:
    """The request's `messages` in the trajectory's format (see the module docstring for what is mapped)."""
    out = []
    for m in raw if isinstance(raw, list) else []:
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            continue
        name = m.get("name")
        out.append(Message(role=_ROLES[m["role"]], content=_text(m.get("content")), name=name if isinstance(name, str) else None,  # type: ignore[arg-type]
                           tool_calls=_tool_calls(m.get("tool_calls")), tool_call_id=m.get("tool_call_id")))
    return out


def _norm(m: Message) -> tuple[Any, ...]:
    calls = tuple((c.function.name, c.function.arguments) for c in m.tool_calls or [])
    return m.role, (m.content or "").strip(), calls, m.tool_call_id


def _prompt_hash(messages: list[Message]) -> str:
    head = []
    for m in messages:
        if m.role == "assistant":
            break
        head.append(_norm(m))
    return hashlib.sha256(json.dumps(head, default=str).encode()).hexdigest()


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


# ---- the trajectory ------------------------------------------------------------------------------
@dataclass
class _Session:
    traj_id: str
    messages: list[Message]
    turns: dict[int, TurnTokens]
    exchanges: list[dict[str, Any]]
    started_at: float
    seen: float


class SessionBook:
    """Per-session state of the conversations being captured (bounded: least recently used sessions and
    sessions idle for `idle_s` are forgotten). Used from the capture worker thread only."""

    def __init__(self, *, max_sessions: int = 2_000, idle_s: float = 3_600.0) -> None:
        self._sessions: OrderedDict[tuple[str, str, str], _Session] = OrderedDict()
        self._max, self._idle = max_sessions, idle_s

    def __len__(self) -> int:
        return len(self._sessions)

    def _forget_old(self, now: float) -> None:
        while self._sessions:
            key, s = next(iter(self._sessions.items()))
            if len(self._sessions) <= self._max and now - s.seen < self._idle:
                return
            del self._sessions[key]

    def trajectory(self, ex: Exchange, reply: Reply, default_app: str,
                   generation_config: Optional[str] = None) -> Trajectory:
        """The trajectory that `ex` (answered by `reply`) makes, or grows (see the module docstring);
        `generation_config` is the vLLM `--generation-config` that answered (None: unknown)."""
        app = (ex.app or default_app)[:128]
        history = request_messages(ex.fields.get("messages"))
        messages = history + [reply.message]
        turn = TurnTokens(message_index=len(history), prompt_token_ids=reply.prompt_token_ids,
                          completion_token_ids=reply.token_ids, completion_logprobs=reply.logprobs,
                          finish_reason=reply.finish_reason,
                          sampling=SamplingRecord.from_request(ex.fields, generation_config))
        # `message_index`: where the reply sits in the conversation, so feedback naming `response_id` can
        # correct that message, not the last one (`collector._export_correction`).
        exchange = {"response_id": reply.response_id, "message_index": len(history),
                    "latency_ms": round(ex.latency_s * 1000, 2), "stream": ex.stream, "finish_reason": reply.finish_reason,
                    "usage": reply.usage, "at": _utc(ex.started_at).isoformat()}
        prompt = _prompt_hash(messages)
        now = time.monotonic()
        s: Optional[_Session] = None
        if ex.session is not None:
            key = (ex.key_id or "", app, ex.session)
            s = self._sessions.get(key)
            if s is not None and [_norm(m) for m in history[:len(s.messages)]] != [_norm(m) for m in s.messages]:
                s = None  # the client started over: a new conversation in the same session
            if s is None:
                seed = "\x00".join((ex.key_id or "", app, ex.session, prompt))
                s = _Session(traj_id="cap-" + hashlib.sha256(seed.encode()).hexdigest()[:32], messages=[], turns={},
                             exchanges=[], started_at=ex.started_at, seen=now)
            self._sessions[key] = s
            self._sessions.move_to_end(key)
            s.messages, s.seen = messages, now
            s.turns[turn.message_index] = turn
            s.exchanges.append(exchange)
            self._forget_old(now)
            traj_id, turns, exchanges, started = (s.traj_id, [s.turns[i] for i in sorted(s.turns)],
                                                  list(s.exchanges), s.started_at)
        else:
            seed = reply.response_id or f"{ex.started_at}-{id(ex)}"
            traj_id = "cap-" + hashlib.sha256(seed.encode()).hexdigest()[:32]
            turns, exchanges, started = [turn], [exchange], ex.started_at
        response_ids = [e["response_id"] for e in exchanges if e["response_id"]]
        # Every key is part of the wire contract (`sdk.wire`): the collector and exports read them.
        metadata: dict[str, Any] = {wire.SOURCE_KEY: wire.SOURCE_GATEWAY, wire.RESPONSE_IDS_KEY: response_ids,
                                    wire.EXCHANGES_KEY: exchanges, wire.USAGE_KEY: wire.total_usage(exchanges)}
        if ex.key_id is not None:
            metadata[wire.KEY_ID_KEY] = ex.key_id
        if ex.session is not None:
            metadata[wire.SESSION_KEY] = ex.session
            metadata[wire.REVISION_KEY] = len(messages)
        if ex.fields.get("tools"):
            metadata[wire.TOOLS_KEY] = ex.fields["tools"]
        if reply.alternatives:
            metadata[wire.ALTERNATIVES_KEY] = reply.alternatives
        return Trajectory(id=traj_id, app=app, task_id=(ex.task or f"prompt-{prompt[:16]}")[:256], model=ex.model,
                          served_version=ex.version, messages=messages, turns=turns, metadata=metadata,
                          started_at=_utc(started), finished_at=_utc(ex.started_at + ex.latency_s))


