"""Where a user's correction goes in a trajectory: the assistant message it replaces.

A correction replaces one assistant message. The messages before it are kept (the history the model saw
when it wrote the wrong message); the messages after it are dropped (they followed from the wrong message).
Which message, by what the feedback named:

- **a trajectory id** (the SDK path): the last assistant message, the episode's final answer;
- **a response id**: the message that completion produced, found through `metadata.exchanges`: the
  exchange's `message_index` (the gateway records it); for captures from before it did, the i-th
  turn's `message_index` for the i-th exchange when turns and exchanges agree in number, else the
  i-th assistant message when those agree in number; else, and for an id no exchange lists, the last
  assistant message.

Each rule's index must point at an assistant message, or the next rule decides: a client may set any
metadata, and the result is always an assistant message of this trajectory. A trajectory without one
gets the correction after all its messages. With one assistant message (a single-turn conversation)
every rule picks it.

Deliberately not here: reading feedback (`_export_query.latest_corrections`) and the line shapes
(`_export_formats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sdk import wire

# The keys of one `metadata.exchanges` record that this module reads (documented in `sdk.wire`).
_RESPONSE_ID = "response_id"
_MESSAGE_INDEX = "message_index"


@dataclass(frozen=True)
class Correction:
    """A user's correction of a trajectory: the text, and the captured completion the feedback named
    (`response_id`; None when it named the trajectory)."""

    text: str
    response_id: str | None = None


def corrected_index(data: dict[str, Any], response_id: str | None) -> int:
    """The index in `data["messages"]` of the assistant message a correction replaces (see the module
    docstring); `len(messages)` when there is no assistant message."""
    ms = data["messages"]
    assistants = [i for i, m in enumerate(ms) if m.get("role") == "assistant"]
    if not assistants:
        return len(ms)
    if response_id is not None:
        for i in _candidates(data, response_id, assistants):
            if i in assistants:
                return i
    return assistants[-1]


def generated_indexes(data: dict[str, Any]) -> set[int]:
    """The indexes in `data["messages"]` of the assistant messages the model wrote, for a conversation captured
    at the gateway: its `metadata.exchanges`' `message_index` (the gateway saw every completion of the session,
    so any other assistant message the client wrote: a few-shot example, a tool call it made up). Empty when
    that is not known: no exchanges (an SDK trajectory, whose loop generates every assistant message after the
    task's prompt), or a capture from before the gateway recorded `message_index`."""
    found = [_index(e) for e in _exchanges(data)]
    if not found or None in found:
        return set()
    return set(found)  # type: ignore[arg-type]


def _exchanges(data: dict[str, Any]) -> list[Any]:
    """The trajectory's `metadata.exchanges` (the gateway's records, one per completion), else []."""
    metadata = data.get("metadata") or {}
    exchanges = metadata.get(wire.EXCHANGES_KEY) if isinstance(metadata, dict) else None
    return exchanges if isinstance(exchanges, list) else []


def _index(record: Any) -> int | None:
    """An exchange's or a turn's `message_index`, when it is an int (a client may set any metadata)."""
    index = record.get(_MESSAGE_INDEX) if isinstance(record, dict) else None
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _candidates(data: dict[str, Any], response_id: str, assistants: list[int]) -> list[int]:
    """The indexes the response id's exchange points at, most reliable first (may be out of range)."""
    exchanges = _exchanges(data)
    position = next((p for p, e in enumerate(exchanges) if isinstance(e, dict) and e.get(_RESPONSE_ID) == response_id),
                    None)
    if position is None:
        return []
    # The recorded index; then, for captures from before `message_index`, the position-th turn's (the gateway
    # added one turn per exchange, in order).
    turns = data.get("turns") or []
    out = [i for i in (_index(exchanges[position]), _index(turns[position]) if len(turns) == len(exchanges) else None)
           if i is not None]
    if len(assistants) == len(exchanges):  # no assistant message the client wrote itself (few-shot) in between
        out.append(assistants[position])
    return out
