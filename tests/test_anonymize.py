"""The anonymizer: each entity kind detected, no false positives on code and arithmetic,
consistent placeholders, whole-trajectory coverage, token ids dropped only when PII was found."""

from __future__ import annotations

import json

import pytest

from collector import AnonymizerState, anonymize_text, anonymize_trajectory
from sdk._types import (
    Message,
    Outcome,
    Step,
    ToolCall,
    ToolCallFunction,
    Trajectory,
    TurnTokens,
)

DETECTED = [
    ("EMAIL", "john.doe+tag@example.co.uk"),
    ("EMAIL", "a_b@sub.domain.io"),
    ("PHONE", "+44 20 7946 0958"),
    ("PHONE", "+1 (415) 555-2671"),
    ("PHONE", "+14155552671"),
    ("PHONE", "(555) 123-4567"),
    ("PHONE", "555-123-4567"),
    ("PHONE", "555.123.4567"),
    ("PHONE", "020 7946 0958"),
    ("IPV4", "192.168.10.20"),
    ("IPV6", "2001:db8:85a3::8a2e:370:7334"),
    ("IPV6", "fe80::1ff:fe23:4567:890a"),
    ("CREDIT_CARD", "4111 1111 1111 1111"),
    ("CREDIT_CARD", "5500-0055-5555-5559"),
    ("CREDIT_CARD", "378282246310005"),
    ("API_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz123456"),
    ("API_KEY", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("API_KEY", "gho_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("API_KEY", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("API_KEY", "AKIAIOSFODNN7EXAMPLE"),
    ("API_KEY", "xoxb-123456789012-abcdefghijklmn"),
    ("JWT", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("PRIVATE_KEY", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1\nq2w3e4r5t6==\n-----END RSA PRIVATE KEY-----"),
    ("PRIVATE_KEY", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"),
]


@pytest.mark.parametrize("kind,value", DETECTED, ids=[f"{k}-{v[:16]}" for k, v in DETECTED])
def test_each_entity_kind_is_detected_in_context(kind: str, value: str) -> None:
    text = f"Contact: {value}, thanks."
    out, ents = anonymize_text(text)
    assert value not in out
    assert out == f"Contact: <{kind}_1>, thanks."
    assert [(e.kind, text[e.start : e.end]) for e in ents] == [(kind, value)]


def test_truncated_private_key_block_is_still_removed() -> None:
    out, ents = anonymize_text("key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nAKcwggSjAgEAAoIBAQC")
    assert "MIIEvQ" not in out and "AKcwgg" not in out
    assert ents[0].kind == "PRIVATE_KEY"


NOT_PII = [
    "37+58*2",
    "print(12*34-5)",
    "x = 1234567890",
    "The answer is 98765432101234",
    "result = 5 + 1234567890123",
    "2024-01-15",
    "01/15/2024",
    "2024-01-15T10:20:30Z",
    "version 1.2.3, v10.4.22, 1.2.3-alpha.4",
    "pi = 3.14159265358979",
    "for i in range(100, 200, 300): print(i*2-1)",
    "a[::2] + b[1::2] + c[100::200]",
    "time 12:34:56",
    "std::vector<int> v; x::y::z",
    "ts = 1700000000000",  # ms timestamp passes Luhn but starts with 1
    "sum([10, 20, 30]) == 60 and 10 - 20 - 30 == -40",
    "def f(x):\n    return x**2 + 3*x - 7\nprint(f(12), 1e-10, 0.5 * 100)",
    "hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "sk-short and sk_ not keys",
    "Task: compute (123 + 456) * 789 - 1011 / 12",
]


@pytest.mark.parametrize("text", NOT_PII)
def test_no_false_positives_on_code_arithmetic_dates_versions(text: str) -> None:
    out, ents = anonymize_text(text)
    assert ents == [] and out == text


@pytest.mark.parametrize("number", ["4111 1111 1111 1112", "5500-0055-5555-5558", "378282246310006", "4012888888881882"])
def test_luhn_invalid_numbers_are_not_cards(number: str) -> None:
    out, ents = anonymize_text(f"card {number}")
    assert not any(e.kind == "CREDIT_CARD" for e in ents)
    assert number in out


def test_same_value_same_placeholder_within_state_and_new_values_count_up() -> None:
    state = AnonymizerState()
    a, _ = anonymize_text("write to Ann@Example.com or bob@example.com", state)
    b, _ = anonymize_text("ann@example.com replied; call (555) 123-4567 / 555-123-4567", state)
    assert a == "write to <EMAIL_1> or <EMAIL_2>"
    # Case-insensitive for emails; formatting-insensitive for phones.
    assert b == "<EMAIL_1> replied; call <PHONE_1> / <PHONE_1>"


def test_overlapping_candidates_longest_most_specific_wins() -> None:
    # The card contains phone- and IP-looking substrings; the PEM block contains base64 that
    # looks like nothing in particular; an IPv4-mapped IPv6 contains an IPv4.
    out, ents = anonymize_text("4111-1111-1111-1111 and ::ffff:192.168.1.20 and 10.0.0.1")
    assert out == "<CREDIT_CARD_1> and <IPV6_1> and <IPV4_1>"
    spans = sorted((e.start, e.end) for e in ents)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))


def _traj(turn_ids: bool = True, pii: bool = True) -> Trajectory:
    email = "jane@corp.example" if pii else "nobody"
    ip = "192.168.0.7" if pii else "localhost"
    phone = "+44 20 7946 0958" if pii else "none"
    return Trajectory(
        task_id="task-1",
        model="policy",
        served_version="policy-v1",
        messages=[
            Message(role="system", content="You are helpful."),
            Message(role="user", content=f"Email {email} about invoice 42"),
            Message(
                role="assistant",
                content=None,
                tool_calls=[
                    ToolCall(
                        id="call_1",
                        function=ToolCallFunction(name="send_mail", arguments=json.dumps({"to": email, "n": 42})),
                    )
                ],
            ),
            Message(role="tool", tool_call_id="call_1", content=f"sent to {email}"),
        ],
        turns=[TurnTokens(message_index=2, prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5], completion_logprobs=[-0.1, -0.2])]
        if turn_ids
        else [],
        steps=[Step(index=0, action=f"mail({email})", observation=f"ok {ip}", info={"peer": {email: [email]}})],
        outcome=Outcome(success=True, reward=1.0, details={"checked": email}),
        metadata={"user": {"contact": email, "phones": [phone]}},
    )


def test_trajectory_every_string_covered_with_one_placeholder_map() -> None:
    anon = anonymize_trajectory(_traj())
    dumped = anon.model_dump_json()
    assert "jane@corp.example" not in dumped and "7946" not in dumped and "192.168.0.7" not in dumped
    assert anon.messages[1].content == "Email <EMAIL_1> about invoice 42"
    assert json.loads(anon.messages[2].tool_calls[0].function.arguments) == {"to": "<EMAIL_1>", "n": 42}
    assert anon.messages[3].content == "sent to <EMAIL_1>"
    assert anon.steps[0].action == "mail(<EMAIL_1>)"
    assert anon.steps[0].info == {"peer": {"<EMAIL_1>": ["<EMAIL_1>"]}}
    assert anon.outcome is not None and anon.outcome.details == {"checked": "<EMAIL_1>"}
    assert anon.metadata["user"] == {"contact": "<EMAIL_1>", "phones": ["<PHONE_1>"]}
    # Ids and structure untouched.
    assert anon.messages[3].tool_call_id == "call_1" and anon.messages[2].tool_calls[0].id == "call_1"


def test_token_ids_dropped_when_pii_found() -> None:
    anon = anonymize_trajectory(_traj(pii=True))
    t = anon.turns[0]
    assert (t.prompt_token_ids, t.completion_token_ids, t.completion_logprobs) == (None, None, None)
    assert t.message_index == 2
    assert anon.metadata["looplift_token_ids_redacted"] is True


def test_token_ids_kept_when_no_pii() -> None:
    original = _traj(pii=False)
    anon = anonymize_trajectory(original)
    assert anon.turns[0].completion_token_ids == [4, 5] and anon.turns[0].prompt_token_ids == [1, 2, 3]
    assert "looplift_token_ids_redacted" not in anon.metadata
    assert anon == original


def test_placeholders_are_not_re_detected() -> None:
    once, _ = anonymize_text("mail x@y.com, call +44 20 7946 0958, card 4111 1111 1111 1111")
    twice, ents = anonymize_text(once)
    assert twice == once and ents == []


def test_large_text_without_pii_is_linear_and_unchanged() -> None:
    text = "for i in range(10):\n    total += i * 37 - 5  # 2024-01-15 v1.2.3\n" * 20_000  # ~1.2 MB
    out, ents = anonymize_text(text)
    assert ents == [] and out == text


def test_cli_anonymize_jsonl_offsets_point_into_the_input() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    exe = str(Path(sys.executable).parent / "collector")
    text = "reach ann@example.org from 192.168.1.20, card 4111 1111 1111 1111"
    lines = json.dumps({"text": text}) + "\n" + json.dumps({"text": "print(37+58*2)"}) + "\n"
    p = subprocess.run([exe, "anonymize", "--json"], input=lines, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    first, second = (json.loads(x) for x in p.stdout.splitlines())
    assert first["text"] == "reach <EMAIL_1> from <IPV4_1>, card <CREDIT_CARD_1>"
    assert [text[e["start"]:e["end"]] for e in first["entities"]] == [
        "ann@example.org", "192.168.1.20", "4111 1111 1111 1111"]
    assert [e["type"] for e in first["entities"]] == ["EMAIL", "IPV4", "CREDIT_CARD"]
    assert second == {"text": "print(37+58*2)", "entities": []}
    bad = subprocess.run([exe, "anonymize", "--json"], input='{"txt": 1}\n', capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "line 1" in bad.stderr and "Traceback" not in bad.stderr
