"""A `/v1` request body, read once: what the gateway checks, and a copy with only `model` rewritten.

The gateway must know the requested `model` and refuse a body that is not a JSON object (or lacks
`messages` / `prompt`) in OpenAI's error format; everything else is vLLM's to judge. So the body is parsed
once, with the standard library's C scanner, walking the top-level object key by key; that yields the same
values `json.loads` would (and the same errors) plus where each top-level value sits in the text. The body
forwarded to vLLM is then the client's own bytes with only the top-level `model` value replaced, rather
than a re-serialization: nothing else changes (key order, number spelling, non-ASCII text), and a large
prompt is not encoded again. A request that already names the version vLLM serves is forwarded as is.

Deliberately not here: validating the rest of the OpenAI schema (vLLM answers those errors itself, in the
same format) and any size limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, cast

# C: (value, end) for the JSON value starting at an index (typeshed does not declare `scan_once`).
_scan_value: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_scan_string = json.decoder.scanstring  # type: ignore[attr-defined]  # C: (str, end) from just after a quote
# The pattern matches the empty string, so `match` never returns None here.
_skip_ws = cast("Callable[[str, int], re.Match[str]]", re.compile(r"[ \t\n\r]*").match)


class BadRequest(Exception):
    """The body cannot be forwarded; `message`, `param` and `code` go into the OpenAI error."""

    def __init__(self, message: str, *, param: Optional[str] = None, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass(frozen=True)
class RequestBody:
    """A parsed body: the top-level fields, and the bytes to send once `model` is resolved."""

    #: The body as UTF-8 (the client's bytes unless they came in another encoding).
    raw: bytes
    text: str
    fields: dict[str, Any]
    #: The requested model (the alias or a version name).
    model: str
    #: Where the top-level `model` value (with its quotes) sits in `text`.
    model_span: tuple[int, int]

    def with_model(self, name: str) -> bytes:
        """The body as received, with the top-level `model` value replaced by `name`."""
        if name == self.model:
            return self.raw
        a, b = self.model_span
        if len(self.raw) == len(self.text):  # ASCII: character offsets are byte offsets
            return b"".join((self.raw[:a], json.dumps(name).encode(), self.raw[b:]))
        return (self.text[:a] + json.dumps(name) + self.text[b:]).encode()


def parse_body(raw: bytes, required: str) -> RequestBody:
    """Parse and check a chat/completions body (`required`: `messages` or `prompt`); raise `BadRequest`."""
    try:
        encoding = json.detect_encoding(raw)  # what json.loads(bytes) accepts: UTF-8 (with or without BOM), -16, -32
        text = raw.decode(encoding)
        fields, spans = _top_level_object(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"The request body is not valid JSON ({e}).", code="invalid_json") from None
    if fields is None:
        raise BadRequest("The request body must be a JSON object.", code="invalid_json")
    model = fields.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("Missing required parameter: 'model' (a string: the alias or a version name).",
                         param="model", code="missing_required_parameter")
    if required not in fields:
        raise BadRequest(f"Missing required parameter: '{required}'.", param=required,
                         code="missing_required_parameter")
    if required == "messages" and not isinstance(fields["messages"], list):
        raise BadRequest("'messages' must be an array of chat messages.", param="messages", code="invalid_type")
    if encoding != "utf-8":
        raw = text.encode()  # vLLM gets UTF-8 without a BOM
    return RequestBody(raw=raw, text=text, fields=fields, model=model, model_span=spans["model"])


def _top_level_object(text: str) -> tuple[Optional[dict[str, Any]], dict[str, tuple[int, int]]]:
    """`json.loads(text)` for a top-level object, with each key's value span; (None, {}) for valid JSON that
    is not an object. Raises `json.JSONDecodeError` as `json.loads` would (duplicate keys: the last wins)."""
    idx = _skip_ws(text, 0).end()
    if text[idx:idx + 1] != "{":
        json.loads(text)  # raises if invalid; valid JSON that is not an object falls through
        return None, {}
    fields: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    idx = _skip_ws(text, idx + 1).end()
    if text[idx:idx + 1] == "}":
        idx += 1
    else:
        while True:
            if text[idx:idx + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, idx)
            key, idx = _scan_string(text, idx + 1)
            idx = _skip_ws(text, idx).end()
            if text[idx:idx + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, idx)
            start = _skip_ws(text, idx + 1).end()
            try:
                value, end = _scan_value(text, start)
            except StopIteration as e:
                raise json.JSONDecodeError("Expecting value", text, e.value) from None
            fields[key], spans[key] = value, (start, end)
            idx = _skip_ws(text, end).end()
            c = text[idx:idx + 1]
            if c == ",":
                idx = _skip_ws(text, idx + 1).end()
            elif c == "}":
                idx += 1
                break
            else:
                raise json.JSONDecodeError("Expecting ',' delimiter", text, idx)
    if _skip_ws(text, idx).end() != len(text):
        raise json.JSONDecodeError("Extra data", text, idx)
    return fields, spans
