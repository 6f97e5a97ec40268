"""`server._body`: the gateway reads a request body once and forwards the client's bytes with only the
top-level `model` rewritten. Properties: it agrees with `json.loads` (values and refusals), the rewrite
touches nothing but that one value, and the checks the gateway owns name the field."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from server._body import BadRequest, parse_body

CHAT = [{"role": "user", "content": "What is 2+3?"}]


@pytest.mark.parametrize("raw,value", [
    (b'{"model": "policy", "messages": []}', b'"policy"'),
    (b'{"messages":[],"model":"policy"}', b'"policy"'),
    (b'  {\n  "model" :\t"policy" ,\r\n "messages": [ ] }  \n', b'"policy"'),
    # "model" also appears as a nested key, as a value and inside strings; only the top-level key counts
    (json.dumps({"tools": [{"type": "function", "function": {"name": "model", "parameters": {
        "type": "object", "properties": {"model": {"type": "string"}}}}}],
        "messages": [{"role": "user", "content": '{"model": "policy"} \\"model\\": \\"policy\\"'}],
        "model": "policy", "metadata": {"model": "policy"}}).encode(), b'"policy"'),
    # non-ASCII before and after the value: character and byte offsets differ
    (json.dumps({"messages": [{"role": "user", "content": "Grüße, 東京 🚀"}], "model": "policy", "user": "Zoë"},
                ensure_ascii=False).encode(), b'"policy"'),
    # duplicate keys: like json.loads (and vLLM), the last one wins, and that is the one rewritten
    (b'{"model": "policy", "messages": [], "model": "policy"}', b'"policy"'),
    (b'{"model": "pol\\u0069cy", "messages": []}', b'"pol\\u0069cy"'),
])
def test_rewrite_changes_only_the_top_level_model(raw: bytes, value: bytes) -> None:
    body = parse_body(raw, "messages")
    assert body.model == "policy"
    out = body.with_model("policy-v7")
    expected = json.loads(raw)
    expected["model"] = "policy-v7"
    assert json.loads(out) == expected
    # Putting the client's value back gives the client's bytes: nothing else was touched.
    assert out.count(b'"policy-v7"') == 1
    head, _, tail = out.partition(b'"policy-v7"')
    assert head + value + tail == raw


def test_nan_and_number_spellings_pass_through_untouched() -> None:
    raw = b'{"model": "policy", "messages": [], "temperature": 0.70, "seed": 1e2, "top_p": NaN}'
    out = parse_body(raw, "messages").with_model("policy-v3")
    assert out == raw.replace(b'"policy"', b'"policy-v3"')


def test_same_model_is_forwarded_as_is() -> None:
    raw = json.dumps({"model": "policy-v2", "messages": CHAT}, ensure_ascii=False, indent=3).encode()
    assert parse_body(raw, "messages").with_model("policy-v2") == raw


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32-le"])
def test_other_unicode_encodings_are_forwarded_as_utf8(encoding: str) -> None:
    text = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "Grüße"}]}, ensure_ascii=False)
    out = parse_body(text.encode(encoding), "messages").with_model("policy-v1")
    assert out == text.replace('"policy"', '"policy-v1"').encode("utf-8")


def test_agrees_with_json_loads_on_random_bodies() -> None:
    rng = random.Random(3)
    words = ["model", "policy", "é", "\\", '"', "\n", "東", "🚀", "x" * 40, ""]

    def value(depth: int) -> Any:
        kind = rng.randrange(7 if depth < 3 else 4)
        if kind == 0:
            return rng.choice(words) + rng.choice(words)
        if kind == 1:
            return rng.choice([0, -1, 3.25, 1e21, True, False, None])
        if kind == 2:
            return rng.randrange(-10**6, 10**6)
        if kind == 3:
            return "".join(rng.choice(words) for _ in range(rng.randrange(4)))
        if kind in (4, 5):
            return {rng.choice(words + ["model"]): value(depth + 1) for _ in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    for _ in range(300):
        fields = {rng.choice(words) + str(i): value(0) for i in range(rng.randrange(5))}
        fields["model"] = rng.choice(["policy", "policy-v2", "é"])
        fields["messages"] = [value(1)]
        items = list(fields.items())
        rng.shuffle(items)
        raw = json.dumps(dict(items), ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 0, 2]),
                         separators=rng.choice([None, (",", ":"), (" , ", " : ")])).encode()
        body = parse_body(raw, "messages")
        assert body.fields == json.loads(raw) and body.model == fields["model"]
        expected = dict(fields, model="policy-v9")
        assert json.loads(body.with_model("policy-v9")) == expected


@pytest.mark.parametrize("raw", [
    b"", b"{", b"{not json", b'{"model": "policy",}', b'{"model" "policy"}', b'{"model": "policy"} x',
    b'{"model": "policy", "messages": [1,]}', b'{"model": undefined}', b'\xff\xfe\xfd', b'{"a": "\x01"}',
    b"{'model': 'policy'}", b'{"model": "policy" "messages": []}',
])
def test_invalid_json_is_refused_like_json_loads(raw: bytes) -> None:
    with pytest.raises((ValueError, UnicodeDecodeError)):
        json.loads(raw)
    with pytest.raises(BadRequest) as e:
        parse_body(raw, "messages")
    assert e.value.code == "invalid_json" and e.value.param is None
    assert e.value.message.startswith("The request body is not valid JSON (")


@pytest.mark.parametrize("raw,param,code,words", [
    (b'[{"model": "policy"}]', None, "invalid_json", "must be a JSON object"),
    (b'"policy"', None, "invalid_json", "must be a JSON object"),
    (b'{"messages": []}', "model", "missing_required_parameter", "'model'"),
    (b'{"model": "", "messages": []}', "model", "missing_required_parameter", "'model'"),
    (b'{"model": 3, "messages": []}', "model", "missing_required_parameter", "'model'"),
    (b'{"model": "policy"}', "messages", "missing_required_parameter", "'messages'"),
    (b'{"model": "policy", "messages": "hi"}', "messages", "invalid_type", "'messages' must be an array"),
])
def test_gateway_checks_name_the_field(raw: bytes, param: Any, code: str, words: str) -> None:
    with pytest.raises(BadRequest) as e:
        parse_body(raw, "messages")
    assert (e.value.param, e.value.code) == (param, code)
    assert words in e.value.message


def test_completions_require_a_prompt() -> None:
    assert parse_body(b'{"model": "policy", "prompt": "1+1="}', "prompt").model == "policy"
    with pytest.raises(BadRequest, match="'prompt'"):
        parse_body(b'{"model": "policy", "messages": []}', "prompt")
