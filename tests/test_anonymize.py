"""The anonymizer: each entity kind detected (with offsets into the input) and its near misses not,
no false positives on code, numbers and capitalized non-names, consistent placeholders, keyed
pseudonyms and format-preserving fakes, every string of a stored trajectory and feedback covered,
token ids dropped only when PII was found, and the CLI on the same code path.

The name/address model is trained on first use and cached under $LOOPLIFT_HOME (~10-40 s once)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from collector import AnonymizerState, anonymize_text, anonymize_trajectory
from collector._anonymize import Anonymizer
from collector._pii_checks import IBAN_LENGTHS, card_iin_ok, iban_mod97, luhn_ok
from collector._pseudonyms import _luhn_check_digit
from sdk._types import (
    Feedback,
    Message,
    Outcome,
    Step,
    ToolCall,
    ToolCallFunction,
    Trajectory,
    TurnTokens,
)


def card(prefix: str, length: int) -> str:
    """A Luhn-valid number of `length` digits starting with `prefix`."""
    body = prefix + "7" * (length - len(prefix) - 1)
    return body + _luhn_check_digit(body)


def found(text: str, anonymizer: Anonymizer | None = None) -> list[tuple[str, str]]:
    """(kind, exact input substring) of every replaced span: checks the offsets against the input."""
    _, ents = anonymize_text(text, anonymizer=anonymizer)
    return [(e.kind, text[e.start:e.end]) for e in ents]


# ---------------------------------------------------------------------------------------------
# Each kind, in a neutral sentence: replaced exactly, nothing else touched.

DETECTED = [
    ("EMAIL", "john.doe+tag@example.co.uk"),
    ("EMAIL", "a_b@sub.domain.io"),
    ("PHONE", "+44 20 7946 0958"),
    ("PHONE", "+1 (415) 555-2671"),
    ("PHONE", "+14155552671"),  # E.164
    ("PHONE", "+1-951-367-8008x3740"),  # extension
    ("PHONE", "001-541-754-3010"),
    ("PHONE", "+49(0)30 1234567"),
    ("PHONE", "+33 (0)5 36 84 33 53"),
    ("PHONE", "+39 09346937140"),
    ("PHONE", "(555) 123-4567"),
    ("PHONE", "555-123-4567"),
    ("PHONE", "555.123.4567"),
    ("PHONE", "(184) 267-3418 x872"),
    ("PHONE", "020 7946 0958"),
    ("PHONE", "(0113) 496 0123"),
    ("PHONE", "05 36 84 33 53"),
    ("PHONE", "04952 883143"),
    ("PHONE", "08-246 820 34"),
    ("PHONE", "01414960676"),  # unformatted, trunk 0
    ("PHONE", "8209679701"),  # unformatted NANP
    ("IPV4", "192.168.10.20"),
    ("IPV6", "2001:db8:85a3::8a2e:370:7334"),
    ("IPV6", "fe80::1ff:fe23:4567:890a"),
    ("CREDIT_CARD", "4111 1111 1111 1111"),
    ("CREDIT_CARD", "5500-0055-5555-5559"),
    ("CREDIT_CARD", "378282246310005"),
    ("CREDIT_CARD", card("501800", 12)),  # Maestro, 12 digits
    ("CREDIT_CARD", card("6759", 16)),  # Maestro
    ("CREDIT_CARD", card("1800", 15)),  # JCB, 15 digits
    ("CREDIT_CARD", card("2131", 15)),  # JCB, 15 digits
    ("CREDIT_CARD", card("30569", 14)),  # Diners
    ("CREDIT_CARD", card("6200", 16)),  # UnionPay
    ("CREDIT_CARD", card("4111", 19)),  # Visa, 19 digits
    ("CREDIT_CARD", card("2221", 16)),  # Mastercard 2-series
    ("IBAN", "DE89 3704 0044 0532 0130 00"),
    ("IBAN", "GB82WEST12345698765432"),
    ("IBAN", "NL91ABNA0417164300"),
    ("SSN", "536-22-1234"),
    ("API_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz123456"),
    ("API_KEY", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("API_KEY", "gho_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("API_KEY", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("API_KEY", "AKIAIOSFODNN7EXAMPLE"),
    ("API_KEY", "xoxb-123456789012-abcdefghijklmn"),
    ("API_KEY", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("API_KEY", "glpat-xxXXyyYYzz0011223344"),
    ("API_KEY", "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"),
    ("API_KEY", "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"),
    ("JWT", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("PRIVATE_KEY", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1\nq2w3e4r5t6==\n-----END RSA PRIVATE KEY-----"),
    ("PRIVATE_KEY", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"),
]


@pytest.mark.parametrize("kind,value", DETECTED, ids=[f"{k}-{v[:16]}" for k, v in DETECTED])
def test_each_entity_kind_is_detected_in_context(kind: str, value: str) -> None:
    text = f"Note: {value}, thanks."
    out, ents = anonymize_text(text)
    assert value not in out
    assert out == f"Note: <{kind}_1>, thanks."
    assert [(e.kind, text[e.start : e.end]) for e in ents] == [(kind, value)]


def test_generated_cards_are_valid_for_their_issuer() -> None:
    for kind, value in DETECTED:
        if kind == "CREDIT_CARD":
            digits = re.sub(r"\D", "", value)
            assert luhn_ok(digits) and card_iin_ok(digits), value


# Kinds that are only PII in context: the span is the value, the context stays.
IN_CONTEXT = [
    ("SSN", "SSN: 536221234 on file", "536221234"),
    ("SSN", "social security number 536 22 1234", "536 22 1234"),
    ("DOB", "Patient born on March 3, 1985, admitted Tuesday.", "March 3, 1985"),
    ("DOB", "DOB: 12/03/1985", "12/03/1985"),
    ("DOB", '{"date_of_birth": "1985-03-12"}', "1985-03-12"),
    ("DOB", "Geburtsdatum: 12.03.1985", "12.03.1985"),
    ("DOB", "née le 3 mars 1985.", "3 mars 1985"),
    ("URL_CREDENTIALS", "DATABASE_URL=postgres://admin:s3cr3t@db.example.com:5432/app", "admin:s3cr3t"),
    ("URL_CREDENTIALS", "git clone https://oauth2:glpat-xx_yy@gitlab.example.com/team/repo.git", "oauth2:glpat-xx_yy"),
    ("SECRET", "api_key=Zx8s9dK2LmQp4RtV7wYb", "Zx8s9dK2LmQp4RtV7wYb"),
    ("SECRET", "password: hunter2", "hunter2"),
    ("SECRET", "DB_PASSWORD=I)+O#biUqDdV1Lq", "I)+O#biUqDdV1Lq"),
    ("SECRET", '{"client_secret": "k5v(6Rrp!", "grant_type": "client_credentials"}', "k5v(6Rrp!"),
    ("SECRET", "Authorization: Bearer abcDEF123456ghiJKL789mno", "abcDEF123456ghiJKL789mno"),
    ("SECRET", "X-Api-Key: 9f8e7d6c5b4a39281726354a", "9f8e7d6c5b4a39281726354a"),
    ("PHONE", "Tel.: 385357855", "385357855"),  # any 8-12 digits when called a phone
    ("PHONE", "secondary=490.699.6030", "490.699.6030"),
    ("PHONE", "> 801.375.9494", "801.375.9494"),
    ("CREDIT_CARD", "cc=4111111111111111", "4111111111111111"),
]


@pytest.mark.parametrize("kind,text,value", IN_CONTEXT, ids=[f"{k}-{t[:24]}" for k, t, _ in IN_CONTEXT])
def test_contextual_kinds_replace_only_the_value(kind: str, text: str, value: str) -> None:
    out, ents = anonymize_text(text)
    assert [(e.kind, text[e.start:e.end]) for e in ents] == [(kind, value)]
    assert out == text.replace(value, f"<{kind}_1>")


def test_url_credentials_keep_scheme_host_and_path() -> None:
    out, _ = anonymize_text("redis://default:pa55w0rd@cache-1.internal:6379/0")
    assert out == "redis://<URL_CREDENTIALS_1>@cache-1.internal:6379/0"


# Near misses: the same shapes, but not PII (or not valid).
NEAR_MISSES = [
    ("CREDIT_CARD", "card 4111 1111 1111 1112"),  # Luhn
    ("CREDIT_CARD", "card 378282246310006"),
    ("CREDIT_CARD", "card 9111111111111111"),  # no issuer starts with 9
    ("CREDIT_CARD", "user_id = 4556737586899855"),  # an id in code
    ("CREDIT_CARD", "ts = 1700000000000"),  # ms timestamp (passes Luhn, starts with 1)
    ("IBAN", "IBAN DE89 3704 0044 0532 0130 01"),  # mod-97
    ("IBAN", "ref XX89370400440532013000"),  # no such country
    ("IBAN", "ref DE8937040044053201300"),  # wrong length for DE
    ("SSN", "id 000-12-3456"),
    ("SSN", "id 666-12-3456"),
    ("SSN", "id 900-12-3456"),
    ("SSN", "id 536-00-1234"),
    ("SSN", "id 536-22-0000"),
    ("SSN", "order 536221234 shipped"),  # bare nine digits without "SSN"
    ("DOB", "Meeting on March 3, 1985 in Ohio."),  # a date, not a birth date
    ("DOB", "born on 2999-01-01"),  # the future
    ("DOB", "DOB: 31/31/1985"),  # not a date
    ("URL_CREDENTIALS", "see https://github.com/user/repo and ssh://git@github.com/x.git"),
    ("URL_CREDENTIALS", "http://example.com:8080/path?user=a"),
    ("SECRET", "max_tokens=4096, token_count: 123456"),
    ("SECRET", "api_key=os.environ['OPENAI_API_KEY']"),
    ("SECRET", "password: ${DB_PASSWORD}"),
    ("SECRET", "api_key=<your key here>"),
    ("SECRET", "secret_name = 'prod-db-credentials'"),
    ("SECRET", 'password_field = "password"'),
    ("SECRET", '"secret": "my-app-secret"'),  # low entropy, no digits
    ("SECRET", "The key is in the drawer; the token ring is closed."),
    ("PHONE", "x = 2147483647"),
    ("PHONE", "order #5551234567"),
    ("PHONE", "Meeting moved to 05/06/2024 10:30"),
    ("PHONE", "epoch 1712345678 and 1712345679"),
    ("PHONE", "f(4155552671) + 3"),
    ("IPV4", "Listening on 0.0.0.0:8080 and 127.0.0.1"),
    ("IPV4", "upgrade to v1.2.3.4"),
    ("API_KEY", "sk-short and sk_ not keys"),
    ("PERSON", "We use Docker and Kubernetes on AWS in Frankfurt."),
    ("PERSON", "ValueError: invalid literal for int() with base 10"),
    ("ADDRESS", "Released version 2.4.1 on Tuesday; see the GitHub Actions log."),
    ("ADDRESS", "Timestamp 1712345678901 ms, Build 2024 took 35 s."),
]


@pytest.mark.parametrize("kind,text", NEAR_MISSES, ids=[f"{k}-{t[:24]}" for k, t in NEAR_MISSES])
def test_near_misses_are_left_alone(kind: str, text: str) -> None:
    assert not [k for k, _ in found(text) if k == kind]


# ---------------------------------------------------------------------------------------------
# Context rules match whole words. A hold-out written by others found IPv4 addresses after
# "server", "driver", "resolver" kept as version numbers ("ver" matched inside the word); each rule
# below is checked with words that contain its keyword and with the keyword itself.

WORDS_ENDING_IN_VER = ["server", "Server:", "driver", "resolver", "observer", "cover", "forever", "fever", "receiver",
                       "solver", "saver", "whatever", "however", "never", "over", "silver", "deliver", "river",
                       "DNS-Server", "upstream_server=", "webserver", "(server", "ver2", "vers"]
VERSION_WORDS = ["version", "Version:", "version=", "ver", "ver.", "VER", "v", "v.", "release", "Release:", "rel."]


@pytest.mark.parametrize("word", WORDS_ENDING_IN_VER)
def test_ipv4_after_a_word_that_merely_ends_like_version_is_replaced(word: str) -> None:
    assert found(f"connected to {word} 10.2.3.4 on port 53", Anonymizer(names=False)) == [("IPV4", "10.2.3.4")]


@pytest.mark.parametrize("word", VERSION_WORDS)
def test_four_dotted_numbers_after_a_version_word_are_kept(word: str) -> None:
    assert found(f"upgraded to {word} 10.2.3.4 today", Anonymizer(names=False)) == []


# Identifiers that merely end in "id" (or contain "is_", "cc", "pan"): not ids, not negations.
@pytest.mark.parametrize("ident", ["david", "paid", "android", "valid", "fluid", "hybrid", "squid", "avoid", "druid"])
def test_numbers_assigned_to_words_ending_in_id_are_not_taken_for_ids(ident: str) -> None:
    a = Anonymizer(names=False)
    assert found(f"{ident}: 4155552671", a) == [("PHONE", "4155552671")]
    assert found(f"{ident}: 4556737586899855", a) == [("CREDIT_CARD", "4556737586899855")]


@pytest.mark.parametrize("ident", ["id", "user_id", "userId", "userID", "order-id", "orderNo", "userid", "max_len",
                                   "account.id", "requestId"])
def test_numbers_assigned_to_ids_are_kept(ident: str) -> None:
    a = Anonymizer(names=False)
    assert found(f"{ident}: 4155552671", a) == [] and found(f"{ident}: 4556737586899855", a) == []


@pytest.mark.parametrize("ident", ["account_id", "company_id", "repayment_id", "accountId", "span_id"])
def test_card_words_inside_longer_words_do_not_make_an_id_a_card(ident: str) -> None:
    assert found(f"{ident}: 4556737586899855", Anonymizer(names=False)) == []


@pytest.mark.parametrize("word", ["Tel.:", "tel", "phone", "Phone:", "phone_number:", "mobilePhone:", "call", "fax",
                                  "Mobile", "cell:", "Telefon:", "téléphone :", "WhatsApp"])
def test_any_digits_after_a_phone_word_are_a_phone(word: str) -> None:
    # Eight digits: a phone only when introduced as one (nine or ten are phones on their own).
    assert found(f"{word} 38535785", Anonymizer(names=False)) == [("PHONE", "38535785")]


@pytest.mark.parametrize("word", ["hotel", "Intel", "motel", "recall", "cancelled", "dialog", "textbook", "telemetry",
                                  "cellar", "Faxon", "contactless", "phoneme", "callback", "unreachable"])
def test_phone_words_inside_longer_words_do_not_make_a_phone(word: str) -> None:
    assert found(f"{word} 38535785", Anonymizer(names=False)) == []


@pytest.mark.parametrize("before", ["SSN", "ssn:", "SSN#", "social security number", "Social-Security:", "soc. sec.",
                                    "tax id", "TaxID:", "TIN", "ITIN:", "ss#"])
def test_bare_ssn_after_an_ssn_word_is_replaced(before: str) -> None:
    assert found(f"{before} 536221234 on file", Anonymizer(names=False)) == [("SSN", "536221234")]


@pytest.mark.parametrize("before", ["syntax id", "Martin", "Justin", "Kristin", "Austin", "lessn", "classn", "pretaxid"])
def test_ssn_words_inside_longer_words_do_not_make_an_ssn(before: str) -> None:
    # Nine bare digits may still be a phone number (ES/PT/PL/CZ numbers have nine): not an SSN.
    assert [k for k, _ in found(f"{before} 536221234 on file", Anonymizer(names=False)) if k == "SSN"] == []


@pytest.mark.parametrize("text", ["born 1985-03-12", "Born: 12/03/1985", "DOB 1985-03-12", "d.o.b. 12/03/1985",
                                  '"patient_dob": "1985-03-12"', "patientDob=1985-03-12", "dateOfBirth: 1985-03-12",
                                  "birth_date=1985-03-12", "Birthday: 12.03.1985", "geboren am 12.03.1985"])
def test_dob_after_a_birth_word_is_replaced(text: str) -> None:
    assert [k for k, _ in found(text, Anonymizer(names=False))] == ["DOB"]


@pytest.mark.parametrize("word", ["stubborn", "newborn", "firstborn", "reborn", "airborne", "adobe", "birthdays_seen",
                                  "rebirthdate"])
def test_birth_words_inside_longer_words_do_not_make_a_dob(word: str) -> None:
    assert found(f"{word} 1985-03-12", Anonymizer(names=False)) == []


@pytest.mark.parametrize("prefix", ["redis", "this", "analysis", "axis", "basis", "chassis", "crisis", "genesis",
                                    "tennis", "thesis", "phash", "khash"])
def test_secret_keys_containing_negation_letters_still_hold_secrets(prefix: str) -> None:
    for key in (f"{prefix}_password", f"{prefix}_token", f"{prefix}_secret"):
        assert found(f"{key}=Zx8s9dK2LmQp4RtV7wYb", Anonymizer(names=False)) == [("SECRET", "Zx8s9dK2LmQp4RtV7wYb")], key


@pytest.mark.parametrize("key", ["is_secret", "has_password", "password_policy", "max_tokens", "token_count",
                                 "secret_name", "key_id", "tokens", "tokenizer", "secretary", "passwordless",
                                 "isSecret", "maxTokens"])
def test_keys_about_secrets_do_not_hold_one(key: str) -> None:
    assert found(f"{key}=Zx8s9dK2LmQp4RtV7wYb", Anonymizer(names=False)) == []


@pytest.mark.parametrize("key", ["api_key", "apiKey", "X-Api-Key", "secretKey", "client_secret", "authtoken",
                                 "dbPassword", "DB_PASSWORD", "access-token", "token2", "pwd", "db_pass"])
def test_secret_keys_as_whole_words_or_compounds(key: str) -> None:
    assert found(f"{key}=Zx8s9dK2LmQp4RtV7wYb", Anonymizer(names=False)) == [("SECRET", "Zx8s9dK2LmQp4RtV7wYb")]


# ---------------------------------------------------------------------------------------------
# Hard negatives: code, numbers, ids and capitalized text without PII stay byte-identical.

NOT_PII = [
    "37+58*2",
    "print(12*34-5)",
    "x = 1234567890",
    "The answer is 98765432101234",
    "result = 5 + 1234567890123",
    "2024-01-15",
    "01/15/2024",
    "2024-01-15T10:20:30Z",
    "2024-01-15 10:20:30.123456+00:00",
    "version 1.2.3, v10.4.22, 1.2.3-alpha.4, numpy==2.3.5 torch==2.13.0",
    "pi = 3.14159265358979",
    "for i in range(100, 200, 300): print(i*2-1)",
    "a[::2] + b[1::2] + c[100::200]",
    "time 12:34:56",
    "std::vector<int> v; x::y::z",
    "ts = 1700000000000",  # ms timestamp passes Luhn but starts with 1
    "sum([10, 20, 30]) == 60 and 10 - 20 - 30 == -40",
    "def f(x):\n    return x**2 + 3*x - 7\nprint(f(12), 1e-10, 0.5 * 100)",
    "hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD -> main)",
    "request_id=550e8400-e29b-41d4-a716-446655440000 trace=4bf92f3577b34da6a3ce929d0e0e4736",
    "Listening on port 8080, pid 48213, workers 4",
    "MAX = 2147483647; UMAX = 4294967295; seed = 1234567890",
    "ids = [4155552671, 4155552672, 4155552673]",
    "max_tokens=4096, temperature=0.7, top_p=0.95",
    "sk-short and sk_ not keys",
    "Task: compute (123 + 456) * 789 - 1011 / 12",
    "Score: 87/100, rank 1234 of 56789.",
    "The population grew from 12,345,678 to 23,456,789 in 2021.",
    "Coordinates 48.85661, 2.35222 (accuracy 12 m).",
    "We deploy FastAPI on Kubernetes with Postgres and Redis in the Frankfurt region.",
    "Traceback (most recent call last):\n  File \"app.py\", line 12, in main\nValueError: bad input",
    "ERROR 2024-03-14 worker-3 processed batch 81234 in 0.52s (queue depth 17)",
    "class UserService(BaseService):\n    MAX_RETRIES = 5\n    def get(self, user_id: int) -> User: ...",
    "Monday's meeting moved to March 3; the Sales team will present the Q3 report.",
]


@pytest.mark.parametrize("text", NOT_PII)
def test_no_false_positives_on_code_numbers_and_capitalized_text(text: str) -> None:
    out, ents = anonymize_text(text)
    assert ents == [] and out == text


# ---------------------------------------------------------------------------------------------
# Names and addresses (the trained model).

NAMES_AND_ADDRESSES = [
    ("Please contact Maria Garcia for details.", [("PERSON", "Maria Garcia")]),
    ("I met John Smith yesterday.", [("PERSON", "John Smith")]),
    ("Dear Mr. Thompson,\nthanks for your order.", [("PERSON", "Thompson")]),
    ("Ticket reopened by Eliza Frost after testing.", [("PERSON", "Eliza Frost")]),
    ("The invoice was sent to Jürgen Müller in Hamburg.", [("PERSON", "Jürgen Müller")]),
    ("The PR by Sophie Martin fixes the Redis timeout.", [("PERSON", "Sophie Martin")]),
    ("assert user.name == 'Alice Johnson'", [("PERSON", "Alice Johnson")]),
    ("Ship it to 221B Baker Street, London NW1 6XE.", [("ADDRESS", "221B Baker Street, London NW1 6XE")]),
    ("Our office moved to 1600 Amphitheatre Parkway, Mountain View, CA 94043.",
     [("ADDRESS", "1600 Amphitheatre Parkway, Mountain View, CA 94043")]),
    ("Lieferadresse: Hauptstraße 5, 10115 Berlin", [("ADDRESS", "Hauptstraße 5, 10115 Berlin")]),
    ("Envoyez-le au 12 rue de la Paix, 75002 Paris.", [("ADDRESS", "12 rue de la Paix, 75002 Paris")]),
]


@pytest.mark.parametrize("text,expected", NAMES_AND_ADDRESSES, ids=[t[:30] for t, _ in NAMES_AND_ADDRESSES])
def test_names_and_addresses(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


def test_placeholders_and_constants_are_not_names() -> None:
    text = "<PERSON_1> met <PERSON_2>; MAX_RETRIES and HTTP_TIMEOUT_SECONDS are CONSTANT_NAMES"
    assert found(text) == []


def test_name_model_is_cached_as_plain_arrays_and_json() -> None:
    from collector._names import NameModelConfig, _model_dir, load_name_model

    load_name_model()
    path = _model_dir(NameModelConfig(), None)
    assert sorted(p.name for p in path.iterdir()) == ["model.json", "weights.npz"]
    import numpy as np

    with np.load(path / "weights.npz", allow_pickle=False) as w:  # no pickle anywhere
        assert w["coef"].shape[0] == 3
    meta = json.loads((path / "model.json").read_text())
    assert meta["config"]["key"] == NameModelConfig().key()
    assert meta["stats"]["seconds"]["total"] > 0


@pytest.mark.model_build
def test_name_model_training_is_deterministic_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from collector import _names

    small = _names.NameModelConfig(n_sentences=1500, seed=3)
    a, b = _names.train(small), _names.train(small)
    assert a["vocab"] == b["vocab"] and np.array_equal(a["coef"], b["coef"])
    _names._cache.pop(small.key(), None)
    model = _names.load_name_model(small, home=tmp_path)  # trains and writes the cache
    assert (_names._model_dir(small, tmp_path) / "weights.npz").is_file()
    _names._cache.pop(small.key(), None)
    monkeypatch.setattr(_names, "train", lambda *a, **k: pytest.fail("retrained despite the cache"))
    again = _names.load_name_model(small, home=tmp_path)
    assert again.find("Please contact Maria Garcia.") == model.find("Please contact Maria Garcia.")


def test_name_model_config_key_tracks_every_field() -> None:
    from collector._names import NameModelConfig

    base = NameModelConfig()
    assert NameModelConfig().key() == base.key()
    assert NameModelConfig(seed=1).key() != base.key()
    assert NameModelConfig(n_sentences=1000).key() != base.key()


# ---------------------------------------------------------------------------------------------
# Placeholders, keyed pseudonyms, fakes.


def test_same_value_same_placeholder_within_state_and_new_values_count_up() -> None:
    state = AnonymizerState()
    a, _ = anonymize_text("write to Ann@Example.com or bob@example.com", state)
    b, _ = anonymize_text("ann@example.com replied; call (555) 123-4567 / 555-123-4567", state)
    assert a == "write to <EMAIL_1> or <EMAIL_2>"
    # Case-insensitive for emails; formatting-insensitive for phones.
    assert b == "<EMAIL_1> replied; call <PHONE_1> / <PHONE_1>"


def test_overlapping_candidates_longest_most_specific_wins() -> None:
    # The card contains phone- and IP-looking substrings; the IBAN contains a phone-looking tail;
    # an IPv4-mapped IPv6 contains an IPv4; the password@host of a URL looks like an e-mail.
    text = "4111-1111-1111-1111 and ::ffff:192.168.1.20 and 10.0.0.1 and DE89 3704 0044 0532 0130 00 and ftp://u:pw@x.org"
    out, ents = anonymize_text(text)
    assert out == "<CREDIT_CARD_1> and <IPV6_1> and <IPV4_1> and <IBAN_1> and ftp://<URL_CREDENTIALS_1>@x.org"
    spans = sorted((e.start, e.end) for e in ents)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))


def test_hmac_pseudonyms_are_stable_across_trajectories_and_depend_on_the_key() -> None:
    a = Anonymizer("hmac", key="k1", names=False)
    first = a.trajectory(_traj()).messages[1].content
    second = a.trajectory(_traj()).messages[1].content  # a separate trajectory, a fresh state
    assert first == second
    assert re.fullmatch(r"Email <EMAIL_[0-9a-f]{8}> about invoice 42", first or "")
    other = Anonymizer("hmac", key="k2", names=False).trajectory(_traj()).messages[1].content
    assert other != first
    # Normalized like placeholders: case does not change the pseudonym.
    assert a.text("JANE@corp.example")[0] == a.text("jane@corp.example")[0]


def test_hmac_key_comes_from_the_environment_or_a_0600_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from collector._anonymize import PSEUDONYM_KEY_FILE

    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))
    monkeypatch.delenv("LOOPLIFT_COLLECTOR_PSEUDONYM_KEY", raising=False)
    a = Anonymizer("hmac", names=False)
    key_file = tmp_path / PSEUDONYM_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert Anonymizer("hmac", names=False).text("x@y.org")[0] == a.text("x@y.org")[0]  # the file is reused
    assert Anonymizer("hmac", key=key_file.read_text().strip(), names=False).text("x@y.org")[0] == a.text("x@y.org")[0]
    monkeypatch.setenv("LOOPLIFT_COLLECTOR_PSEUDONYM_KEY", "from-env")
    assert Anonymizer("hmac", names=False).text("x@y.org")[0] == Anonymizer("hmac", key="from-env", names=False).text("x@y.org")[0]
    assert "from-env" not in repr(Anonymizer("hmac", names=False))


FAKE_CASES = [
    ("EMAIL", "Mail jane.doe@corp.example today", "jane.doe@corp.example"),
    ("PHONE", "Call +44 20 7946 0958 today", "+44 20 7946 0958"),
    ("PHONE", "Call (415) 555-2671 today", "(415) 555-2671"),
    ("PHONE", "Call 05 36 84 33 53 today", "05 36 84 33 53"),
    ("CREDIT_CARD", "Card 4111 1111 1111 1111 today", "4111 1111 1111 1111"),
    ("IBAN", "IBAN DE89 3704 0044 0532 0130 00 today", "DE89 3704 0044 0532 0130 00"),
    ("IPV4", "Host 192.168.10.20 today", "192.168.10.20"),
    ("IPV6", "Host 2001:db8:85a3::8a2e:370:7334 today", "2001:db8:85a3::8a2e:370:7334"),
    ("SSN", "SSN 536-22-1234 today", "536-22-1234"),
]


@pytest.mark.parametrize("kind,text,value", FAKE_CASES, ids=[k + "-" + v[:10] for k, _, v in FAKE_CASES])
def test_fakes_keep_the_format_and_are_deterministic(kind: str, text: str, value: str) -> None:
    fake = Anonymizer("fake", key="k1", names=False)
    out, ents = fake.text(text)
    replacement = ents[0].placeholder
    assert value not in out and out == text.replace(value, replacement)
    assert fake.text(text)[0] == out  # same value + key -> same fake
    assert Anonymizer("fake", key="k2", names=False).text(text)[0] != out  # another key, another fake
    # Still the same kind of thing: the detector finds it again, with the same shape.
    assert [k for k, _ in found(replacement, Anonymizer(names=False))] == [kind]
    assert re.sub(r"[0-9]", "0", re.sub(r"[a-z]", "a", replacement)) == re.sub(r"[0-9]", "0", re.sub(r"[a-z]", "a", value)) \
        or kind in ("EMAIL", "IPV4", "IPV6")
    if kind == "CREDIT_CARD":
        assert luhn_ok(re.sub(r"\D", "", replacement))
    if kind == "IBAN":
        compact = replacement.replace(" ", "")
        assert iban_mod97(compact) == 1 and len(compact) == IBAN_LENGTHS["DE"] and compact[:2] == "DE"
    if kind == "EMAIL":
        assert replacement.endswith(("@example.com", "@example.net", "@example.org"))


def test_fake_names_keep_word_count_and_case() -> None:
    fake = Anonymizer("fake", key="k1")
    out, ents = fake.text("Please contact Maria Garcia for details.")
    (name,) = [e.placeholder for e in ents if e.kind == "PERSON"]
    assert len(name.split()) == 2 and all(w[0].isupper() for w in name.split()) and "Maria" not in out
    assert fake.text("Please contact Maria Garcia for details.")[0] == out


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="placeholder, hmac, fake"):
        Anonymizer("reversible")


# ---------------------------------------------------------------------------------------------
# Trajectories: every string, one replacement map, token ids.


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


def test_json_strings_with_escapes_are_decoded_before_detection() -> None:
    # json.dumps escapes non-ASCII: "Jürgen Müller" would hide behind \u00fc; a line break behind \n.
    args = json.dumps({"to": "Jürgen Müller", "address": "Hauptstraße 5\n10115 Berlin", "n": 1})
    assert "\\u00fc" in args
    traj = _traj()
    traj.messages[2].tool_calls[0].function.arguments = args  # type: ignore[index]
    anon = anonymize_trajectory(traj)
    new_args = anon.messages[2].tool_calls[0].function.arguments  # type: ignore[index]
    decoded = json.loads(new_args)
    assert decoded["n"] == 1 and "Müller" not in new_args and "M\\u00fcller" not in new_args
    assert decoded["to"].startswith("<PERSON_") and decoded["address"].startswith("<ADDRESS_")
    assert new_args == json.dumps(decoded)  # re-encoded in the original's style (json.dumps defaults)


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


# Every place a string can hide in a stored row, each with its own kinds of PII.
SECRETS_BY_PLACE = {
    "task": "Alice Johnson",
    "system": "alice.johnson@example.org",
    "user": "+44 20 7946 0958",
    "user_name": "Bob Lee",
    "tool_args": "4111 1111 1111 1111",
    "tool_args_escaped": "Jürgen Müller",
    "tool_name": "DE89 3704 0044 0532 0130 00",
    "tool_output": "536-22-1234",
    "assistant": "Hauptstraße 5, 10115 Berlin",
    "action": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "observation": "192.168.77.12",
    "info_key": "carol@example.net",
    "info_value": "2001:db8:85a3::8a2e:370:7334",
    "outcome_error": "s3cr3t-Pa55",
    "outcome_details": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "metadata_nested": "March 3, 1985",
    "metadata_list": "+1 (415) 555-2671",
    "metadata_key": "dave@example.com",
    "feedback_correction": "Erin Walsh",
    "feedback_text": "erin.walsh@example.com",
}


def _traj_everywhere() -> Trajectory:
    s = SECRETS_BY_PLACE
    return Trajectory(
        id="traj-pii-everywhere",
        task_id=f"support ticket for {s['task']}",
        model="policy",
        messages=[
            Message(role="system", content=f"Escalations go to {s['system']}."),
            Message(role="user", name="Bob_Lee", content=f"I'm {s['user_name']}, call me on {s['user']}."),
            Message(role="assistant", content=None, tool_calls=[
                ToolCall(id="call_1", function=ToolCallFunction(
                    name="pay", arguments=json.dumps({"card": s["tool_args"], "holder": s["tool_args_escaped"],
                                                       "iban": s["tool_name"]}))),
            ]),
            Message(role="tool", tool_call_id="call_1", content=json.dumps({"ok": True, "ssn_on_file": f"SSN {s['tool_output']}"})),
            Message(role="assistant", content=f"Done. The parcel goes to {s['assistant']}."),
        ],
        steps=[Step(index=0, action=f"git push https://{s['action']}@github.com/x/y",
                    observation=f"connected to {s['observation']}",
                    info={s["info_key"]: {"peer": s["info_value"]}})],
        outcome=Outcome(success=False, reward=0.0, error=f"login failed: password={s['outcome_error']}",
                        details={"session": s["outcome_details"]}),
        metadata={"user": {"profile": {"dob": f"born on {s['metadata_nested']}"}},
                  "phones": ["x", s["metadata_list"]], s["metadata_key"]: True},
    )


def test_no_pii_survives_in_any_stored_string(tmp_path: Path) -> None:
    from collector import open_store

    db = tmp_path / "c.db"
    store = open_store(f"sqlite:///{db}")
    try:
        store.add_trajectories([_traj_everywhere()])
        store.add_feedback(Feedback(trajectory_id="traj-pii-everywhere", rating=-1.0,
                                    correction=f"Ask {SECRETS_BY_PLACE['feedback_correction']} instead.",
                                    text=f"Reply to {SECRETS_BY_PLACE['feedback_text']}"))
    finally:
        store.close()
    with sqlite3.connect(db) as conn:
        raw_rows = [" ".join(str(c) for c in r) for r in conn.execute("SELECT * FROM trajectories")]
        raw_rows += [" ".join(str(c) for c in r) for r in conn.execute("SELECT * FROM feedback")]
        (data,) = conn.execute("SELECT data FROM trajectories").fetchone()
    raw = "\n".join(raw_rows)
    # Also the stored JSON decoded, and every JSON string inside it decoded again (tool arguments,
    # tool output), so that no "\u00fc" escape can hide a value from the check.
    def strings(v: object) -> list[str]:
        if isinstance(v, str):
            try:
                inner = json.loads(v)
            except ValueError:
                return [v]
            return [v, *strings(inner)] if isinstance(inner, (dict, list)) else [v]
        if isinstance(v, dict):
            return [x for k, val in v.items() for x in (*strings(k), *strings(val))]
        if isinstance(v, list):
            return [x for item in v for x in strings(item)]
        return []
    decoded = "\n".join(strings(json.loads(data)))
    for place, value in SECRETS_BY_PLACE.items():
        assert value not in raw and value not in decoded, f"{place}: {value!r} survived"
    assert "traj-pii-everywhere" in raw and "call_1" in raw  # ids kept, rows joinable


def test_store_uses_the_configured_pseudonyms(tmp_path: Path) -> None:
    from collector import open_store

    store = open_store(f"sqlite:///{tmp_path / 'c.db'}", anonymizer=Anonymizer("hmac", key="k", names=False))
    try:
        t1, t2 = _traj(), _traj()
        t2.id = "second"
        store.add_trajectories([t1, t2])
        a, b = store.get(t1.id), store.get("second")
    finally:
        store.close()
    assert a is not None and b is not None
    assert a.messages[1].content == b.messages[1].content  # stable across trajectories
    assert re.fullmatch(r"Email <EMAIL_[0-9a-f]{8}> about invoice 42", a.messages[1].content or "")


def test_settings_read_the_mode_and_create_the_key(tmp_path: Path) -> None:
    from collector import CollectorSettings
    from collector.errors import ConfigError

    s = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_COLLECTOR_ANONYMIZE_MODE": "hmac"})
    assert s.anonymize_mode == "hmac" and s.pseudonym_key is not None
    assert stat.S_IMODE((tmp_path / "collector_pseudonym.key").stat().st_mode) == 0o600
    assert s.pseudonym_key.get_secret_value() not in repr(s)
    assert s.make_anonymizer().mode == "hmac"
    s2 = CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_COLLECTOR_ANONYMIZE_MODE": "fake",
                                     "LOOPLIFT_COLLECTOR_PSEUDONYM_KEY": "k"})
    assert s2.pseudonym_key is not None and s2.pseudonym_key.get_secret_value() == "k"
    assert CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path)}).anonymize_mode == "placeholder"
    with pytest.raises(ConfigError):
        CollectorSettings.from_env({"LOOPLIFT_HOME": str(tmp_path), "LOOPLIFT_COLLECTOR_ANONYMIZE_MODE": "rot13"})


def test_placeholders_are_not_re_detected() -> None:
    once, _ = anonymize_text("mail x@y.com, call +44 20 7946 0958, card 4111 1111 1111 1111, ask Maria Garcia")
    twice, ents = anonymize_text(once)
    assert twice == once and ents == []


def test_large_text_without_pii_is_linear_and_unchanged() -> None:
    text = "for i in range(10):\n    total += i * 37 - 5  # 2024-01-15 v1.2.3\n" * 20_000  # ~1.2 MB
    out, ents = anonymize_text(text)
    assert ents == [] and out == text
    code = "class Handler(BaseHandler):\n    def Run(self, Request: HttpRequest) -> None:\n        Log.Info('ok')\n" * 5_000
    out, ents = anonymize_text(code)
    assert ents == [] and out == code


# ---------------------------------------------------------------------------------------------
# CLI: the same code path.


def _cli(args: list[str], stdin: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "collector")
    return subprocess.run([exe, *args], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_cli_anonymize_jsonl_offsets_point_into_the_input() -> None:
    text = "reach ann@example.org from 192.168.1.20, card 4111 1111 1111 1111, ask Maria Garcia"
    lines = json.dumps({"text": text}) + "\n" + json.dumps({"text": "print(37+58*2)"}) + "\n"
    p = _cli(["anonymize", "--json"], lines)
    assert p.returncode == 0, p.stderr
    first, second = (json.loads(x) for x in p.stdout.splitlines())
    assert first["text"] == "reach <EMAIL_1> from <IPV4_1>, card <CREDIT_CARD_1>, ask <PERSON_1>"
    assert [text[e["start"]:e["end"]] for e in first["entities"]] == [
        "ann@example.org", "192.168.1.20", "4111 1111 1111 1111", "Maria Garcia"]
    assert [e["type"] for e in first["entities"]] == ["EMAIL", "IPV4", "CREDIT_CARD", "PERSON"]
    assert second == {"text": "print(37+58*2)", "entities": []}
    bad = _cli(["anonymize", "--json"], '{"txt": 1}\n')
    assert bad.returncode == 2 and "line 1" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_cli_modes_match_the_library(seeded_home: Path) -> None:
    line = json.dumps({"text": "mail ann@example.org"}) + "\n"
    env = {"LOOPLIFT_HOME": str(seeded_home), "LOOPLIFT_COLLECTOR_PSEUDONYM_KEY": "cli-key"}
    hm = _cli(["anonymize", "--json", "--mode", "hmac"], line, env)
    assert hm.returncode == 0, hm.stderr
    expected = Anonymizer("hmac", key="cli-key", names=False).text("mail ann@example.org")[0]
    assert json.loads(hm.stdout)["text"] == expected
    fk = _cli(["anonymize", "--json", "--mode", "fake"], line, env)
    assert json.loads(fk.stdout)["text"] == Anonymizer("fake", key="cli-key", names=False).text("mail ann@example.org")[0]
    bad = _cli(["anonymize", "--mode", "rot13"], "x\n", env)
    assert bad.returncode == 2 and "anonymize_mode" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------------------------------------
# Formats found missing on text this project did not generate (bench/anonymize_eval.py, dev split).

MORE_FORMATS = [
    ("IBAN", "Virement sur le compte FR14 2004 1010 0505 0001 3M02 606, merci.", "FR14 2004 1010 0505 0001 3M02 606"),
    ("DOB", "Er ist am 3. März 1958 geboren.", "3. März 1958"),
    ("PHONE", "5944,Villads Ejlersen,21 45 17 27", "21 45 17 27"),  # DK/NO 2-2-2-2
    ("PHONE", "236,Gunter,736 107 343", "736 107 343"),  # CZ/SK/PL/PT 3-3-3
    ("PHONE", "Fuentes,910.734.364", "910.734.364"),
    ("PHONE", "Cliente: (11) 98765-4321", "(11) 98765-4321"),  # an area code in brackets, no trunk 0
    ("PHONE", "hi, this is Kristen, my new number is 7051 0101", "7051 0101"),
    ("SECRET", "password=ZD\"(wOQBde~( user=bob", "ZD\"(wOQBde~("),
    ("SECRET", "password={'fdp!&^@tshKNJ:5.>* user=bob", "{'fdp!&^@tshKNJ:5.>*"),
    ("SECRET", "mysql -h db.prod -u reporting -p'Qz7#mK2$vL9!' analytics", "Qz7#mK2$vL9!"),
    ("SECRET", "client_secret: k;X(2]v~Qz!9", "k;X(2]v~Qz!9"),
    ("SECRET", 'client_secret: 23C"L9{WXu//HM"G', '23C"L9{WXu//HM"G'),
    ("SECRET", "client_secret=vRsMy2jVBY", "vRsMy2jVBY"),
]


@pytest.mark.parametrize("kind,text,value", MORE_FORMATS, ids=[f"{k}-{v[:14]}" for k, _, v in MORE_FORMATS])
def test_formats_from_the_independent_dev_set(kind: str, text: str, value: str) -> None:
    assert (kind, value) in found(text, Anonymizer(names=False))


def test_a_card_passed_to_a_call_after_a_secret_word_stays_a_card() -> None:
    text = 'token = tokenize(pan="4111111111111111", cvv="123")'
    assert found(text, Anonymizer(names=False)) == [("CREDIT_CARD", "4111111111111111")]


@pytest.mark.parametrize("text", ["The population is 601 622 262 inhabitants.", "Budget: 601 622 262 EUR",
                                  "price $ 601 622 262", "order 601 622 262", "x = (12) 3456-7890 + 1",
                                  "api_key=abc,def", "token = tokens[0]", "secret = compute(a, b)",
                                  "mysql -h db -P 3306 app"])
def test_look_alikes_of_those_formats_stay(text: str) -> None:
    assert found(text, Anonymizer(names=False)) == []


NAMES_IN_CONTEXT = [
    ("Dear Ms. Post,\nyour parcel is on its way.", [("PERSON", "Post")]),  # a title makes a person
    ("Spedire a Giulia Bianchi, Via Roma 10, 00184 Roma RM", [("PERSON", "Giulia Bianchi"),
                                                              ("ADDRESS", "Via Roma 10, 00184 Roma RM")]),
    ("7,Ägwar Lestander,+46-473-421-451", [("PERSON", "Ägwar Lestander"), ("PHONE", "+46-473-421-451")]),
    ("payment_method: card on file, holder Koós, Szenta", [("PERSON", "Koós, Szenta")]),
    ("Meeting notes: Alpike will draft the RFC.", [("PERSON", "Alpike")]),
    ("Moving to 957 Bjørnheimveien next month.", [("ADDRESS", "957 Bjørnheimveien")]),
]


@pytest.mark.parametrize("text,expected", NAMES_IN_CONTEXT, ids=[t[:28] for t, _ in NAMES_IN_CONTEXT])
def test_names_and_addresses_in_context(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


def test_places_on_their_own_are_not_addresses() -> None:
    for text in ("Version 5.9.33 deployed to 9 hosts in Boa Vista.", "Stack: Postgres 16 on Debian 12."):
        assert [k for k, _ in found(text) if k == "ADDRESS"] == [], text


# ---------------------------------------------------------------------------------------------
# The engine: one trigger pass (hyperscan, or the pure-Python fallback), and the span memo.


def _corpus() -> list[str]:
    from collector._pii_checks import iban_mod97  # noqa: F401  (the corpus is the test data above)

    texts = [f"Note: {v}, thanks." for _, v in DETECTED] + [t for _, t, _ in IN_CONTEXT] + NOT_PII
    texts += [t for _, t in NEAR_MISSES] + [t for _, t, _ in MORE_FORMATS] + [t for t, _ in NAMES_AND_ADDRESSES]
    texts += [f"connected to {w} 10.2.3.4" for w in WORDS_ENDING_IN_VER + VERSION_WORDS]
    return texts


def test_python_fallback_finds_exactly_what_hyperscan_finds() -> None:
    from collector import _pii_scan

    pytest.importorskip("hyperscan")
    assert _pii_scan.backend() == "hyperscan"  # installed with the [collector] extra: it is what runs
    with_hs = [_pii_scan.find(t) for t in _corpus()]
    _pii_scan.use_backend("python")
    try:
        assert [_pii_scan.find(t) for t in _corpus()] == with_hs
    finally:
        _pii_scan.use_backend("hyperscan")
    assert any(with_hs)


def test_span_memo_returns_copies_and_clears() -> None:
    a = Anonymizer(names=False)
    first = a.detect("mail ann@example.org")
    first.clear()  # a caller mutating its result must not change the next answer
    assert [k for _s, _e, k, _key in a.detect("mail ann@example.org")] == ["EMAIL"]
    a.clear_cache()
    assert a.detect("plain lowercase words, nothing here") == []


def test_hand_written_evaluation_files_parse() -> None:
    import importlib.util

    # Loaded by path: putting bench/ on sys.path would let bench/sandboxes.py shadow the package.
    path = Path(__file__).resolve().parents[1] / "bench" / "anonymize_eval.py"
    spec = importlib.util.spec_from_file_location("bench_anonymize_eval", path)
    assert spec is not None and spec.loader is not None
    anonymize_eval = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = anonymize_eval  # dataclasses look their module up
    spec.loader.exec_module(anonymize_eval)
    for split in ("dev", "holdout"):
        samples = anonymize_eval.load_handwritten(split)
        assert len(samples) >= 90
        for s in samples:  # gold spans point at their values, no markup left over
            assert not re.search(r"\[\[[A-Z_]+: ", s.text) and all(0 <= g.start < g.end <= len(s.text) for g in s.gold)


def test_schema_v2_step_tool_call_is_scanned_and_its_id_and_the_end_reason_kept() -> None:
    traj = _traj()
    traj.steps[0].tool_call = ToolCall(id="call 10.2.3.4", function=ToolCallFunction(
        name="send_mail", arguments=json.dumps({"to": "jane@corp.example"})))
    traj.end_reason = "max_steps"
    anon = anonymize_trajectory(traj)
    call = anon.steps[0].tool_call
    assert call is not None and call.id == "call 10.2.3.4"  # an id: kept as it is, like message tool calls
    assert json.loads(call.function.arguments) == {"to": "<EMAIL_1>"}
    assert anon.end_reason == "max_steps"


def test_the_parameter_after_a_masked_token_is_not_its_value() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    assert found(f"token={jwt}&expires=3600", Anonymizer(names=False)) == [("JWT", jwt)]


# ---------------------------------------------------------------------------------------------
# Phone formats of other generators' locales, written without a phone word (a CSV or log field):
# the class the hold-out's PHONE misses belonged to (Mimesis/Faker masks of DA, NO, ET, ES, MX,
# IT, GR, PT-BR, LT, FI, SE, BE written here by hand, other digits).

UNANNOUNCED_PHONES = ["3711766726", "3294578123", "32804796692", "957275130", "920900547", "2101825968",
                      "63 822 392", "435 91 936", "8437-4387", "7246 8767", "5863-183-936", "(3421)-4517",
                      "+(370) 95896935", "(+358) 494205552", "92 3464-6869", "08-89 91 39", "06/ 981 98 46",
                      "2980 259791", "25260 67 869"]
NEUTRAL_FIELDS = ["{}", "value: {}", "id;name;{}", "| {} |", "x,{},y", '"{}"', "Anna Berg;Storgata 4;{}"]


@pytest.mark.parametrize("phone", UNANNOUNCED_PHONES)
@pytest.mark.parametrize("template", NEUTRAL_FIELDS)
def test_phones_without_a_phone_word(phone: str, template: str) -> None:
    text = template.format(phone)
    assert ("PHONE", phone) in found(text, Anonymizer(names=False)), text


@pytest.mark.parametrize("text", ["released 2019-2024", "from 1990 2000", "on 1985-03-12", "Due 2024/01/15.",
                                  "CEP 62226-290", "12 345 678 EUR", "total $ 4385 7724", "order 957275130",
                                  "x = 3711766726", "[4155552671, 4155552672]", "ids: 7, 957275130, 8",
                                  "epoch 1712345678", "sha 11 22 3333 4444 5555 6666 7777"])
def test_phone_shaped_look_alikes_stay(text: str) -> None:
    assert [v for k, v in found(text, Anonymizer(names=False)) if k == "PHONE"] == []


@pytest.mark.parametrize("text,value", [
    ("Contact: Aleks Lepmets | 0167.3644", "0167.3644"),  # the label further back on the line
    ("Telefon: Kadri Tamm, 5312 8846", "5312 8846"),
    ("tel 372-8-9709-9897", "372-8-9709-9897"),  # a one-digit area code after the country code
])
def test_phones_announced_further_back(text: str, value: str) -> None:
    assert ("PHONE", value) in found(text, Anonymizer(names=False))


# Secrets: short random tokens after a key (Mimesis-style passwords), passwords said in prose.
@pytest.mark.parametrize("text,value", [
    ("api_key: EUP~|aMD?mQGQ", "EUP~|aMD?mQGQ"),
    ("token: Aalw2RuN-ZL^~", "Aalw2RuN-ZL^~"),
    ("app_secret: ;\"M`II.kqLy3=xb).@", ";\"M`II.kqLy3=xb).@"),
    ("my password is Zo}'VgvfOju", "Zo}'VgvfOju"),
    ("the new pwd is k5v(6Rrp!x now", "k5v(6Rrp!x"),
    ("Das Passwort ist 'Qz7#mK2$vL9' ok", "Qz7#mK2$vL9"),
])
def test_short_random_secrets_and_prose_passwords(text: str, value: str) -> None:
    assert ("SECRET", value) in found(text, Anonymizer(names=False))


@pytest.mark.parametrize("text", ["the password is wrong", "my password is incorrect again",
                                  "token: refresh_token_name", "api_key: required", "password is: ********"])
def test_secret_look_alikes_in_prose_stay(text: str) -> None:
    assert [v for k, v in found(text, Anonymizer(names=False)) if k == "SECRET"] == []


# Issue 21: addresses as one span whatever the country's order, PO boxes, names with particles, and the
# evaluation on other generators' data (bench/anonymize_external.py). Values here are not that set's.
WHOLE_ADDRESSES = [
    ("Ship to Vesterbrogade 12, 1620 København V today", "Vesterbrogade 12, 1620 København V"),
    ("Our office: 1061 Budapest, Andrássy út 22", "1061 Budapest, Andrássy út 22"),
    ("neuer Sitz: Lindenstraße 7, 50674 Köln", "Lindenstraße 7, 50674 Köln"),
    ("adres: ul. Piotrkowska 104/6, 90-004 Łódź", "ul. Piotrkowska 104/6, 90-004 Łódź"),
    ("send it to 48 Elm Road, Leeds LS6 2AB please", "48 Elm Road, Leeds LS6 2AB"),
    ("billing: 700 Pine Ave, Boulder, CO 80302", "700 Pine Ave, Boulder, CO 80302"),
    ("Levering: Drottninggatan 88, 111 36 Stockholm", "Drottninggatan 88, 111 36 Stockholm"),
]


@pytest.mark.parametrize("text,value", WHOLE_ADDRESSES, ids=[v[:16] for _t, v in WHOLE_ADDRESSES])
def test_an_address_is_masked_from_street_to_city_in_the_country_order(text: str, value: str) -> None:
    out, entities = anonymize_text(text)
    start = text.index(value)
    assert any(e.kind == "ADDRESS" and e.start <= start and e.end >= start + len(value) for e in entities), out


@pytest.mark.parametrize("text,value", [
    ("Postfach 12 03 44, 80331 München", "Postfach 12 03 44, 80331 München"),
    ("returns go to Box 412, 114 79 Stockholm", "Box 412, 114 79 Stockholm"),
    ("mail: P.O. Box 5521, Reno, NV 89513", "P.O. Box 5521, Reno, NV 89513"),
])
def test_po_boxes_are_addresses(text: str, value: str) -> None:
    out, _ = anonymize_text(text)
    assert value not in out and "<ADDRESS_1>" in out, out


def test_a_box_without_a_postcode_is_no_address() -> None:
    assert anonymize_text("the Box 3 model ships in 2 colours")[1] == []


@pytest.mark.parametrize("name", ["Ana Lucía de la Torre", "Gian Marco Lo Bianco", "Pieter van den Broek",
                                  "Mary-Ann O'Sullivan"])
def test_names_with_particles_and_several_parts_are_one_person(name: str) -> None:
    out, entities = anonymize_text(f"the request was signed by {name} yesterday")
    assert out == "the request was signed by <PERSON_1> yesterday", out


def test_two_capitalized_words_in_lowercase_prose_are_a_person() -> None:
    assert anonymize_text("we met Olek Dziuba yesterday")[0] == "we met <PERSON_1> yesterday"


@pytest.mark.parametrize("text", ["the Mobile App crashed", "Weather in San Francisco is nice",
                                  "Build 17, 8080 Server failed"])
def test_capitalized_things_and_numbers_stay(text: str) -> None:
    assert anonymize_text(text)[1] == []


def test_an_address_the_model_runs_over_an_iban_keeps_its_name_and_street() -> None:
    out, _ = anonymize_text("IBAN DE89 3704 0044 0532 0130 00, Inhaber Max Mustermann, Lindenstraße 7, 50674 Köln")
    for leaked in ("Mustermann", "Lindenstraße", "50674", "Köln"):
        assert leaked not in out, out


def test_external_evaluation_data_parses_and_covers_twenty_countries() -> None:
    import importlib.util

    bench = Path(__file__).resolve().parents[1] / "bench"
    for name in ("anonymize_eval", "anonymize_external"):  # by path: bench/ on sys.path would shadow packages
        spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    external = sys.modules["anonymize_external"]
    samples = external.load_hand()
    assert len(samples) >= 100 and len({s.locale for s in samples}) >= 20
    for s in samples:
        assert not re.search(r"\[\[[A-Z_]+: ", s.text) and all(0 <= g.start < g.end <= len(s.text) for g in s.gold)
    # The scoring rules: found at >= 80% masked, a leak at 4 unmasked letters or digits in a row, whole at none.
    g = external.Gold("PERSON", 0, 10, "xx")
    text = "Anna Berg!"
    assert external.span_outcome(text, g, [True] * 10) == {"found": True, "leak": False, "whole": False, "frac": 1.0}
    half = external.span_outcome(text, g, [True] * 5 + [False] * 5)
    assert not half["found"] and half["leak"] and not half["whole"]
    assert external.span_outcome(text, g, [False] * 10)["whole"]


@pytest.mark.parametrize("text,name", [
    ("收货人：李建国，电话稍后补充", "李建国"),
    ("회원 박서준 님 문의", "박서준"),
    ("المرسل: محمد العمري، شكرا", "محمد العمري"),
    ("担当者: 鈴木 一郎 (営業部)", "鈴木 一郎"),
])
def test_names_in_scripts_without_capitals(text: str, name: str) -> None:
    out, entities = anonymize_text(text)
    assert name not in out and any(e.kind == "PERSON" for e in entities), out


@pytest.mark.parametrize("text", ["我们周末去北京，高级会员马上到。", "2024年3月5日发布了3个版本。", "версия 2.3 выпущена"])
def test_prose_in_those_scripts_stays(text: str) -> None:
    assert anonymize_text(text)[1] == []


@pytest.mark.parametrize("text,value", [
    ("адрес: пр. Ленина, д. 40, кв. 7, Екатеринбург, 620014", "пр. Ленина, д. 40, кв. 7, Екатеринбург, 620014"),
    ("地址：上海市浦东新区世纪大道100号", "上海市浦东新区世纪大道100号"),
    ("주소: 부산광역시 해운대구 우동길 31", "부산광역시 해운대구 우동길 31"),
])
def test_addresses_in_other_scripts_are_one_span(text: str, value: str) -> None:
    out, entities = anonymize_text(text)
    start = text.index(value)
    assert any(e.kind == "ADDRESS" and e.start <= start and e.end >= start + len(value) for e in entities), out


@pytest.mark.parametrize("text,value", [
    ('{"recipient": "Tiago Lemos", "items": 2}', "Tiago Lemos"),
    ("assignee=Ewa Nowak status=open", "Ewa Nowak"),
    ("Cardholder: HOLM, INGA\n", "HOLM, INGA"),
])
def test_values_of_person_fields_are_names(text: str, value: str) -> None:
    out, _ = anonymize_text(text)
    assert value not in out and "<PERSON_1>" in out, out


@pytest.mark.parametrize("text", ['def greet(name="World"):', '{"owner": "None", "name": "build"}', "user=admin"])
def test_person_fields_holding_no_one_stay(text: str) -> None:
    assert anonymize_text(text)[1] == []


def test_surname_comma_first_name_is_one_person() -> None:
    out, _ = anonymize_text("Refund of 20.00 EUR for Vaitkus, Tomas to the card on file")
    assert "Vaitkus" not in out and "Tomas" not in out, out


def test_a_country_code_in_brackets_belongs_to_the_phone() -> None:
    out, _ = anonymize_text("call back on (+971) 5247315911 after 5")
    assert "971" not in out and "<PHONE_1>" in out, out
