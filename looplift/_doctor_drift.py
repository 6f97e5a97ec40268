"""The doctor's prefix_drift check: multi-turn episodes (tool calls, code, arithmetic) replayed as vLLM serves
them, the turns whose next prompt does not extend prompt + completion counted, and the trainer's token rows
(`trainer.episode_rows`) checked to keep every sampled id. `envs` and `trainer` are imported when it runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ._doctor_checks import _FIX_TEMPLATE, Check, Message, _fail, _ok, _skip
from ._doctor_render import Renderer, _first_difference, _Model, _Reader, _reader, _RenderError, served_text

_CODE = 'def is_prime(n: int) -> bool:\n    """True for primes."""\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n'


# ---- multi-turn prefix continuity ----------------------------------------------------------------------------------

def _renumbered(messages: Sequence[Message]) -> list[Message]:
    """Tool-call ids made 9-character alphanumerics (Mistral's format requires them), consistently per episode."""
    ids: dict[str, str] = {}
    out = []
    for msg in messages:
        m = dict(msg)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": ids.setdefault(c["id"], f"call{len(ids):05d}")} for c in m["tool_calls"]]
        if m.get("tool_call_id") in ids:
            m["tool_call_id"] = ids[m["tool_call_id"]]
        out.append(m)
    return out


def _episodes() -> list[tuple[list[Message], list[Message]]]:
    """Multi-turn demonstrations: tool calls (calc, order lookup), arithmetic through code, and code that ends in a
    newline (content a model writes, which a trimming template loses)."""
    from envs import demonstration, training_tasks
    from trainer import calc_demo, lookup_demo

    rng = random.Random(0)
    eps = [calc_demo(t, rng, miscopy_p=0.0) for t in training_tasks(3, 11)]
    eps += [lookup_demo(rng, miscopy_p=0.0) for _ in range(3)]
    eps += [([dict(x) for x in demonstration(t, rng, miscopy_p=0.0)], []) for t in training_tasks(3, 12)]
    eps.append(([{"role": "system", "content": "You write Python."},
                 {"role": "user", "content": "Write is_prime(n) in solution.py."},
                 {"role": "assistant", "content": _CODE},
                 {"role": "user", "content": "1 of 3 tests failed: is_prime(1)."},
                 {"role": "assistant", "content": "It returns False for 1; the tests pass now."}], []))
    return [(_renumbered(msgs), tools) for msgs, tools in eps]


@dataclass(frozen=True)
class _Replay:
    """One episode as vLLM served it: per assistant turn the prompt ids and the completion ids."""

    turns: tuple[tuple[list[int], list[int]], ...]


def _reply_message(text: str, info: Any) -> Message:
    """The assistant message an app sends back: vLLM's parsed content and tool calls (their ids as vLLM made them)."""
    calls = list(getattr(info, "tool_calls", None) or [])
    if not calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": info.content or None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in calls]}


def _replay(r: Renderer, reader: Optional[_Reader], vtok: Any, messages: Sequence[Message],
            tools: Sequence[Message]) -> _Replay:
    """Serve `messages` turn by turn: render the prompt, take the demonstrated turn's ids as the sample, decode and
    parse them as vLLM does, and continue the conversation with what the app gets back."""
    convo: list[Message] = []
    renamed: dict[str, str] = {}
    turns = []
    for msg in messages:
        if msg["role"] != "assistant":
            convo.append({**msg, "tool_call_id": renamed.get(msg["tool_call_id"], msg["tool_call_id"])}
                         if "tool_call_id" in msg else dict(msg))
            continue
        prompt, completion = r.ids(convo, tools, True), r.completion(convo, msg, tools)
        if reader is not None:
            text, info = reader.read(completion, convo, tools, r.stops)
        else:
            stripped = completion[:-1] if completion and completion[-1] in r.stops else completion
            text, info = served_text(vtok, stripped, skip_special_tokens=True), None
        reply = _reply_message(text, info)
        for old, new in zip(msg.get("tool_calls") or [], reply.get("tool_calls") or []):
            renamed[old["id"]] = new["id"]
        convo.append(reply)
        turns.append((prompt, completion))
    return _Replay(tuple(turns))


def _drifted(replay: _Replay) -> list[int]:
    """Turns k (1-based, of the next turn) whose prompt does not start with turn k-1's prompt + completion."""
    out = []
    for k in range(1, len(replay.turns)):
        (p0, c0), (p1, _) = replay.turns[k - 1], replay.turns[k]
        if p1[: len(p0) + len(c0)] != p0 + c0:
            out.append(k)
    return out


def _rows_keep_ids(replays: Sequence[_Replay]) -> tuple[bool, int]:
    """Build the trainer's token rows from the replayed turns (as from captured vLLM ids) and check that the
    loss-carrying tokens are exactly the sampled completions, in order. Returns (kept, rows)."""
    from trainer import Episode, Turn, episode_rows

    n_rows, kept = 0, True
    for j, rep in enumerate(replays):
        ep = Episode(f"doctor-{j}", 1.0, tuple(Turn(tuple(p), tuple(c), (0.0,) * len(c)) for p, c in rep.turns))
        rows = episode_rows(ep)
        n_rows += len(rows)
        trained = [t for row in rows for t, loss in zip(row.ids, row.loss) if loss]
        kept = kept and trained == [t for _, c in rep.turns for t in c]
    return kept, n_rows


def _prefix_drift(m: _Model, tools_ok: bool) -> Check:
    name = "prefix_drift"
    if m.vtok is None:
        return _skip(name, m.vllm_missing or "vLLM's tokenizer did not load")
    reader, _ = _reader(m)
    episodes = [(msgs, tools) for msgs, tools in _episodes() if tools_ok or not tools]
    left_out = "" if tools_ok else "; tool episodes left out (tool_round_trip failed)"
    r = m.served()
    try:
        replays = [_replay(r, reader if tools_ok else None, m.vtok, msgs, tools) for msgs, tools in episodes]
    except _RenderError as e:
        return _fail(name, f"{r.name} cannot render a multi-turn episode: {e}", _FIX_TEMPLATE)
    drifted = [(j, k) for j, rep in enumerate(replays) for k in _drifted(rep)]
    transitions = sum(max(len(rep.turns) - 1, 0) for rep in replays)
    kept, rows = _rows_keep_ids(replays)
    figures = {"episodes": len(replays), "turns": sum(len(rep.turns) for rep in replays), "transitions": transitions,
               "drifted": len(drifted), "rate": round(len(drifted) / transitions, 4) if transitions else 0.0,
               "rows": rows}
    measured = (f"{len(drifted)} of {transitions} next-turn prompts do not extend prompt + completion "
                f"({figures['rate']:.0%}) in {len(replays)} episodes")
    if drifted:
        j, k = drifted[0]
        measured += f", first at episode {j} turn {k}{_drift_example(m, replays[j], k)}"
    if not kept:
        return _fail(name, f"{measured}; the trainer's rows lost sampled ids",
                     "train from captured ids (trainer.episode_rows) only; report this as a trainer bug", **figures)
    return _ok(name, f"{measured}; the trainer's {rows} rows keep every sampled id{left_out}", **figures)


def _drift_example(m: _Model, rep: _Replay, k: int) -> str:
    (p0, c0), (p1, _) = rep.turns[k - 1], rep.turns[k]
    want = p0 + c0
    at = _first_difference(want, p1)
    tok = m.vtok if m.mode == "mistral" else m.tok
    return f" (where the previous prompt + completion has {tok.decode(want[at:at + 6])!r}, it has {tok.decode(p1[at:at + 6])!r})"
