"""Anonymizer benchmark: looplift's anonymizer vs Presidio's analyzer on the same generated text.

    .venv/bin/python bench/anonymize.py [--n 4000] [--seed 7] [--json-out bench/results/anonymize.json]

Data, generated in this run with Faker and `random` from `--seed` (the name/address model trains on
seed 0 with its own templates, `collector/_names_data.py`; these templates are written separately):

- `n` sentences, each holding one or two values of the 15 entity types at known offsets (the
  generator inserts them), ~20% without PII: arithmetic, dates, versions, timestamps, UUIDs, hashes,
  ports, Python, and capitalized non-names (products, companies, cities on their own, weekdays) to
  count false positives. Phones come from 8 Faker locales, cards from every Faker card type (16-digit
  ones also grouped), IBANs from 12 countries (also grouped), names and addresses from 14 locales,
  three of which (lt_LT, lv_LV, tr_TR) the name model never saw;
- ~1 MB of realistic agent trajectories (code, tracebacks, JSON tool results, logs, chat, with PII
  sprinkled in) for throughput on what ingest actually sees, and `bench/collector.py`'s 4 KB
  trajectories for the per-trajectory time ingest pays;
- the independent set of `bench/anonymize_eval.py` (hand-written + Mimesis, dev and hold-out splits):
  the recall and precision that count, since this file's sentences come from Faker like the name
  model's training text.

Scoring, per entity type: a prediction is a true positive if it overlaps a gold span of the same
type; precision = true-positive predictions / predictions; recall = gold spans hit / gold spans.
`char_recall` is stricter: the fraction of the gold spans' letters and digits covered by predictions
of any type (what is left is what leaks). Presidio types are mapped: EMAIL_ADDRESS -> EMAIL,
PHONE_NUMBER -> PHONE, IP_ADDRESS -> IPV4 / IPV6 (by the gold type it overlaps; by ":" otherwise),
CREDIT_CARD, IBAN_CODE -> IBAN, US_SSN -> SSN. Presidio has no recognizer for the other types
(PERSON and LOCATION need a spaCy NER model, which is a download): "—" in the table.

Presidio runs fully offline: an NLP engine wrapping `spacy.blank("en")` (no NER model, so only the
pattern recognizers fire), asked only for the six comparable entity types, and tldextract pinned to
its bundled public suffix snapshot so the email recognizer never goes to the network. Throughput:
CPU seconds of this process (both systems are single-threaded; on a shared machine wall time mostly
measures the neighbours), best of 5 passes for looplift, each after the name model's word cache was
emptied and refilled from 1,000 sentences of another seed (common words known, the names in the timed
text new: a running collector), best of 3 with the cache empty ("cold"), best of 2 for Presidio.

The name model is trained here from scratch (`--no-train` to reuse the cache) to measure training
time; the result is the same model ingest would build.

The span memo and the name model's word cache are emptied before every timed pass (`steady`), so
no timed string is known in advance. The trigger backend (hyperscan) is also swapped for its
pure-Python fallback once, to check that both find the same and to report the fallback's speed.

Needs the `bench` extras: presidio-analyzer, faker, mimesis. If Presidio cannot be imported the benchmark
still reports looplift alone.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import platform
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# First on the path even when PYTHONPATH has it: bench/collector.py must not shadow the package.
sys.path.insert(0, str(ROOT))

from faker import Faker  # noqa: E402
from faker.providers.credit_card import Provider as CardProvider  # noqa: E402

import anonymize_eval  # noqa: E402  (bench/ is on the path when this file runs as a script)
from anonymize_eval import FREEFORM, KINDS, Sample, Span, score  # noqa: E402

from collector import _names, _pii_scan  # noqa: E402
from collector._anonymize import Anonymizer  # noqa: E402
from collector._names_data import stable  # noqa: E402
from sdk._types import Message, Step, ToolCall, ToolCallFunction, Trajectory  # noqa: E402

PRESIDIO_KINDS = ("EMAIL", "PHONE", "IPV4", "IPV6", "CREDIT_CARD", "IBAN", "SSN")
PRESIDIO_ENTITIES = ["EMAIL_ADDRESS", "PHONE_NUMBER", "IP_ADDRESS", "CREDIT_CARD", "IBAN_CODE", "US_SSN"]
PRESIDIO_MAP = {"EMAIL_ADDRESS": "EMAIL", "PHONE_NUMBER": "PHONE", "CREDIT_CARD": "CREDIT_CARD", "IBAN_CODE": "IBAN",
                "US_SSN": "SSN"}
PHONE_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "en_CA")
IBAN_LOCALES = ("en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "pl_PL", "pt_PT", "fi_FI", "cs_CZ", "de_AT",
                "nl_BE")
# Names and addresses: eleven locales the name model is trained on, three it never saw (their
# addresses use Faker's en_US formats with local names).
NAME_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "pl_PL", "fi_FI", "cs_CZ", "hu_HU",
                "lt_LT", "lv_LV", "tr_TR")
UNSEEN_LOCALES = tuple(loc for loc in NAME_LOCALES if loc not in _names.TRAIN_LOCALES)
LOCALES = tuple(dict.fromkeys(PHONE_LOCALES + IBAN_LOCALES + NAME_LOCALES))

# Issue 8's targets, the same for this generated set and the independent one (`anonymize_eval`).
TARGET_RECALL = anonymize_eval.TARGET_RECALL
TARGET_PRECISION = anonymize_eval.TARGET_PRECISION
TARGET_NAME_RECALL = anonymize_eval.TARGET_FREEFORM_RECALL
TARGET_SPEEDUP = 50.0


# ---------------------------------------------------------------------------------------------
# Data generation

TECH = ("Kubernetes", "Postgres", "Grafana", "Terraform", "FastAPI", "Redis", "Sentry", "Jenkins", "Airflow",
        "Snowflake", "Vercel", "Django", "PyTorch", "Docker Compose", "GitHub Actions", "Azure DevOps")
DOB_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y", "%B %d, %Y", "%d %B %Y", "%b %d, %Y")
B64 = string.ascii_letters + string.digits + "+/"


class Gen:
    def __init__(self, seed: int) -> None:
        Faker.seed(seed)
        self.rng = random.Random(seed)
        self.fake = Faker(list(LOCALES))
        for loc in LOCALES:  # reproducible across processes (see `stable`)
            stable(self.fake[loc])

    def _alnum(self, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def _person(self, f: Any) -> tuple[str, str, str]:
        """(title prefix not part of the gold span, the name, suffix)."""
        r = self.rng
        first, last = f.first_name(), f.last_name()
        u = r.random()
        if u < 0.45:
            return "", f"{first} {last}", ""
        if u < 0.55:
            return r.choice(["Mr. ", "Ms. ", "Dr. ", "Mrs. ", "Prof. "]), last, ""
        if u < 0.65:
            return r.choice(["Mr. ", "Ms. ", "Dr. "]), f"{first} {last}", ""
        if u < 0.77:
            return "", first, ""
        if u < 0.85:
            return "", f"{first} {r.choice(string.ascii_uppercase)}. {last}", ""
        if u < 0.90:
            return "", f"{last}, {first}", ""
        if u < 0.95:
            return "", f"{first} {last}".upper(), ""
        return "", f.name(), ""

    def value(self, kind: str) -> tuple[str, str]:
        """A fresh value of `kind` and its sub-format label (for the per-format breakdown)."""
        f, r = self.fake, self.rng
        if kind == "EMAIL":
            return (f["en_US"].email(), "") if r.random() < 0.5 else (f[r.choice(PHONE_LOCALES)].free_email(), "")
        if kind == "PHONE":
            loc = r.choice(PHONE_LOCALES)
            return f[loc].phone_number(), loc
        if kind == "IPV4":
            return f["en_US"].ipv4(), ""
        if kind == "IPV6":
            return f["en_US"].ipv6(), ""
        if kind == "CREDIT_CARD":
            # Same distribution as credit_card_number() with no argument, but we keep the type.
            ctype = r.choice(list(CardProvider.credit_card_types))
            num = f["en_US"].credit_card_number(card_type=ctype)
            if len(num) == 16 and r.random() < 0.4:  # also the grouped way people type them
                sep = r.choice(" -")
                num = sep.join(num[i:i + 4] for i in range(0, 16, 4))
                ctype += "_grouped"
            return num, ctype
        if kind == "IBAN":
            loc = r.choice(IBAN_LOCALES)
            iban = f[loc].iban()
            if r.random() < 0.4:
                return " ".join(iban[i:i + 4] for i in range(0, len(iban), 4)), iban[:2] + "_grouped"
            return iban, iban[:2]
        if kind == "SSN":
            ssn = f["en_US"].ssn()
            u = r.random()
            if u < 0.7:
                return ssn, "dashed"
            if u < 0.85:
                return ssn.replace("-", " "), "spaced"
            return ssn.replace("-", ""), "bare"
        if kind == "DOB":
            d = f["en_US"].date_of_birth(minimum_age=18, maximum_age=90)
            fmt = r.choice(DOB_FORMATS)
            return d.strftime(fmt), fmt
        if kind == "URL_CREDENTIALS":
            user = f["en_US"].user_name()
            pw = self._alnum(r.randrange(8, 24), string.ascii_letters + string.digits + "-_.~!*")
            return f"{user}:{pw}", ""
        if kind == "API_KEY":
            which = r.randrange(3)
            if which == 0:
                return "sk-" + self._alnum(40), "openai"
            if which == 1:
                return "ghp_" + self._alnum(36), "github"
            return "AKIA" + self._alnum(16, string.ascii_uppercase + string.digits), "aws"
        if kind == "JWT":
            def b64(obj: dict[str, Any]) -> str:
                raw = json.dumps(obj, separators=(",", ":")).encode()
                return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
            header = b64({"alg": r.choice(["HS256", "RS256"]), "typ": "JWT"})
            payload = b64({"sub": str(r.randrange(10**6)), "name": f["en_US"].name(),
                           "iat": r.randrange(1_600_000_000, 1_750_000_000)})
            sig = self._alnum(43, string.ascii_letters + string.digits + "-_")
            return f"{header}.{payload}.{sig}", ""
        if kind == "PRIVATE_KEY":
            label = r.choice(["RSA ", "EC ", "OPENSSH ", ""])
            body = "\n".join(self._alnum(64, B64) for _ in range(r.randrange(3, 9)))
            return f"-----BEGIN {label}PRIVATE KEY-----\n{body}\n-----END {label}PRIVATE KEY-----", label.strip() or "pkcs8"
        if kind == "SECRET":
            if r.random() < 0.35:
                return f["en_US"].password(length=r.randrange(8, 20)), "password"
            return self._alnum(r.randrange(20, 48), string.ascii_letters + string.digits + "_-"), "token"
        if kind == "PERSON":
            loc = r.choice(NAME_LOCALES)
            return self._person(f[loc])[1], loc
        if kind == "ADDRESS":
            loc = r.choice(NAME_LOCALES)
            u = r.random()
            a = f[loc].street_address() if u < 0.4 else f[loc].address()
            if u >= 0.4 and r.random() < 0.5:
                a = a.replace("\n", ", ")
            return a.strip(), loc
        raise ValueError(kind)

    # Templates: "{}" slots are filled with values of the listed kinds, in order.
    ONE = (
        "Please contact {} for details.",
        "The user reported that {} was not working after the update.",
        "Logged in from {} at 09:14 yesterday.",
        "value: {}",
        "Error 403 while calling the API with {}; retried 3 times.",
        "I already sent it to {}, can you check?",
        'config = {{"contact": "{}", "retries": 5}}',
        "> {}\n(quoted from the ticket #4821)",
        "Output of step 2: {}.",
        "Saved {} in the notes (line 17).",
        "Here it is: {}",
        "tool result: {{'ok': true, 'value': '{}'}}",
    )
    # Kinds that are only PII in context (a date, a random string, user:pass) use only their own templates.
    CONTEXT_ONLY = ("DOB", "URL_CREDENTIALS", "SECRET")
    BY_KIND = {
        "EMAIL": ("Send the invoice to {}.", "From: {}\nSubject: Q3 report", "email={}&page=2",
                  "Reach me at <{}> anytime."),
        "PHONE": ("Call me on {} tomorrow.", "Tel.: {}", "phone: {}, ext. desk 4",
                  "You can reach the office at {} between 9 and 17."),
        "IPV4": ("ssh admin@{} -p 22", "The server at {} returned 502.", "ping {}",
                 "Allowed hosts: {}, localhost"),
        "IPV6": ("Connecting to [{}]:8443 failed.", "inet6 {} prefixlen 64", "Peer {} is unreachable.",
                 "AAAA record points to {}."),
        "CREDIT_CARD": ("Charge the card {} for $129.99.", "card number: {} exp 04/27",
                        "Payment with {} was declined.", "cc={}"),
        "IBAN": ("Please wire the deposit to {} by Friday.", "IBAN: {}", "Bankverbindung: {} (Sparkasse)",
                 "Refund goes to account {}, reference 2231."),
        "SSN": ("SSN: {}", "Her social security number is {}.", "ssn={}", "Tax form W-2, SSN {} verified."),
        "DOB": ("Patient born on {}, admitted Tuesday.", "DOB: {}", "date of birth: {}", "He was born {} in Ohio.",
                '{{"name": "redacted", "date_of_birth": "{}"}}', "Geburtsdatum: {}", "birthday {} (needs a cake)"),
        "URL_CREDENTIALS": ("DATABASE_URL=postgres://{}@db.internal:5432/app",
                            "git clone https://{}@git.example.com/team/repo.git",
                            "Connecting to redis://{}@cache-1:6379/0 ...", "amqp://{}@rabbit.svc:5672/%2f",
                            "proxy set to http://{}@proxy.corp.internal:3128"),
        "API_KEY": ("export OPENAI_API_KEY={}", "Use the token {} for the CI job.",
                    'headers = {{"Authorization": "Bearer {}"}}', "aws_access_key_id = {}"),
        "JWT": ("Authorization: Bearer {}", "The session cookie was {}.", "jwt: {}",
                "token={}&expires=3600"),
        "PRIVATE_KEY": ("Here is the deploy key:\n{}", "id_rsa contents:\n{}\n(do not share)"),
        # Random tokens where tokens go, passwords where passwords go (see `value`).
        "SECRET": ("api_key={}", '{{"client_secret": "{}", "grant_type": "client_credentials"}}',
                   "X-Api-Key: {}", "stripe_secret = '{}'", "Authorization: Bearer {}"),
        "SECRET_PASSWORD": ("DB_PASSWORD={}", "password: {}", '{{"username": "admin", "password": "{}"}}',
                            "mysql -h db -u app --password={} shop"),
        "PERSON": ("Please forward this to {} when you get a chance.", "Assigned to: {}", "{} wrote:\n> see below",
                   "Thanks, {}", "The reviewer ({}) approved the change.", "Meeting with {} moved to 3pm.",
                   '{{"owner": "{}", "priority": "high"}}', "Signed,\n{}", "{} joined the channel.",
                   "Ticket reopened by {} after testing.", "Interview candidate: {}", "ask {} about the budget"),
        "ADDRESS": ("Deliver to {} before noon.", "Mailing address: {}", "She moved to {} last year.",
                    "Return label:\n{}", '{{"address": "{}", "verified": false}}', "Pickup point: {}",
                    "The venue is {}; parking on site."),
    }
    TWO = (
        "User {} logged in from {}.",
        "Forward {} to the team and note {} in the log.",
        "{} | {}",
        "Details: first {}, then {}.",
        "contact={}; secondary={}",
    )
    TITLED = ("Dear {}{},\nyour order has shipped.", "Appointment for {}{} confirmed.", "Letter to {}{} returned.")

    def _fill(self, template: str, values: list[tuple[str, str, str]]) -> Sample:
        parts = template.replace("{{", "\0").replace("}}", "\1").split("{}")
        text, gold = "", []
        for i, part in enumerate(parts):
            text += part.replace("\0", "{").replace("\1", "}")
            if i < len(values):
                kind, value, sub = values[i]
                if kind:
                    gold.append(Span(kind, len(text), len(text) + len(value), sub))
                text += value
        return Sample(text, tuple(gold))

    def pii_sample(self) -> Sample:
        r = self.rng
        kinds = [r.choice(KINDS)] if r.random() < 0.65 else [r.choice(KINDS), r.choice(KINDS)]
        if any(k in self.CONTEXT_ONLY for k in kinds):
            kinds = [next(k for k in kinds if k in self.CONTEXT_ONLY)]
        if len(kinds) == 1:
            k = kinds[0]
            if k == "PERSON" and r.random() < 0.3:  # titles outside the gold span
                loc = r.choice(NAME_LOCALES)
                title, name, _ = self._person(self.fake[loc])
                return self._fill(r.choice(self.TITLED), [("", title, ""), ("PERSON", name, loc)])
            value, sub = self.value(k)
            if k == "SECRET":
                template = r.choice(self.BY_KIND["SECRET_PASSWORD" if sub == "password" else "SECRET"])
            elif k == "SSN" and sub != "dashed" or k in self.CONTEXT_ONLY:
                template = r.choice(self.BY_KIND[k])
            else:
                template = r.choice(self.BY_KIND[k] + self.ONE)
            return self._fill(template, [(k, value, sub)])
        # Two values in generic templates: an SSN there is the dashed form (the others need context).
        values = [(k, *((self.fake["en_US"].ssn(), "dashed") if k == "SSN" else self.value(k))) for k in kinds]
        return self._fill(r.choice(self.TWO), values)

    def clean_sample(self) -> Sample:
        r, f = self.rng, self.fake["en_US"]
        a, b, c = r.randrange(2, 999), r.randrange(2, 999), r.randrange(2, 99)
        d = f.date_between("-5y", "+1y")
        choices = (
            f"The result of {a}+{b}*{c} is {a + b * c}.",
            f"{a} * {b} = {a * b}, and {a * b} - {c} = {a * b - c}.",
            f"Released version {r.randrange(1, 20)}.{r.randrange(0, 40)}.{r.randrange(0, 200)} on {d.isoformat()}.",
            f"Meeting moved to {d.strftime('%d/%m/%Y')} at {r.randrange(0, 24):02d}:{r.randrange(0, 60):02d}.",
            f"Order #{r.randrange(10000, 99999)} shipped {c} items totaling ${r.randrange(10, 9999)}.{r.randrange(0, 100):02d}.",
            f"lr = {r.random():.6f}; eps = 1e-{r.randrange(3, 12)}; steps = {r.randrange(1000, 200000)}",
            f"Timestamp {r.randrange(1_600_000_000_000, 1_750_000_000_000)} ms, took {r.randrange(1, 9999)} us.",
            f"Build {d.strftime('%Y%m%d')}.{r.randrange(1, 50)} finished in {r.random() * 500:.2f} s.",
            f"x = np.arange({a})[{c}::{r.randrange(2, 9)}]; print(x.shape)",
            f"The population grew from {r.randrange(10**6, 10**8):,} to {r.randrange(10**6, 10**8):,} in {d.year}.",
            f"Coordinates {r.uniform(-90, 90):.5f}, {r.uniform(-180, 180):.5f} (accuracy {c} m).",
            f"assert f({a}, {b}) == {a * b} + {c} - {c}",
            f"Score: {r.randrange(0, 100)}/{100}, rank {r.randrange(1, 5000)} of {r.randrange(5000, 90000)}.",
            f"Line {a}, column {b}: expected ';' (0x{r.randrange(0, 2**32):08x}).",
            # code-like hard negatives
            f"request_id={f.uuid4()} trace={r.getrandbits(128):032x}",
            f"commit {r.getrandbits(160):040x} (HEAD -> main)",
            f"Listening on 0.0.0.0:{r.randrange(1024, 65535)} (pid {r.randrange(100, 99999)})",
            f"MAX = {r.choice([2147483647, 4294967295, 9223372036854775807])}; seed = {r.randrange(10**9, 10**10)}",
            f"max_tokens={r.randrange(16, 4096)}, tokenizer='{r.choice(['gpt2', 'llama-3'])}', password_min_length={r.randrange(8, 16)}",
            f"sha256: {r.getrandbits(256):064x}",
            f"epoch {r.randrange(1_500_000_000, 1_800_000_000)} -> {d.isoformat()}T{r.randrange(0, 24):02d}:00:00Z",
            f"ids = [{r.randrange(10**9, 10**10)}, {r.randrange(10**9, 10**10)}, {r.randrange(10**11, 10**12)}]",
            f"numpy=={r.randrange(1, 3)}.{r.randrange(0, 30)}.{r.randrange(0, 9)} torch=={r.randrange(1, 3)}.{r.randrange(0, 9)}.0",
            # capitalized non-names
            f"{r.choice(TECH)} {r.randrange(2, 9)}.{r.randrange(0, 20)} is deployed in the {f.city()} region.",
            f"{f.last_name()} {r.choice(['Inc', 'LLC', 'Ltd', 'GmbH', 'Group', 'PLC'])} signed the contract on "
            f"{r.choice(['Monday', 'Friday', 'Tuesday'])}.",
            f"Migrated from {r.choice(TECH)} to {r.choice(TECH)} in {d.strftime('%B')}.",
            f"The {f.country()} team uses {r.choice(TECH)} and {r.choice(TECH)}.",
            f"Traceback: File \"{r.choice(['app', 'main', 'worker'])}.py\", line {a}, in Handler.Process\nValueError: bad input",
        )
        return Sample(r.choice(choices), ())

    def dataset(self, n: int) -> list[Sample]:
        return [self.clean_sample() if self.rng.random() < 0.2 else self.pii_sample() for _ in range(n)]

    # -- realistic trajectories ----------------------------------------------------------------

    CODE = '''import json
from pathlib import Path

def load_users(path: Path) -> list[dict]:
    """Read the users file and drop inactive accounts."""
    with path.open() as f:
        users = [json.loads(line) for line in f if line.strip()]
    return [u for u in users if u.get("active", True) and u["age"] >= 18]

class RateLimiter:
    def __init__(self, rate: float = 10.0, burst: int = 20) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)

    def allow(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        return self.tokens >= 1
'''
    TRACE = '''Traceback (most recent call last):
  File "/srv/app/worker.py", line 214, in run
    result = handler.process(batch, timeout=30.0)
  File "/srv/app/handlers.py", line 88, in process
    raise ValueError(f"unexpected status {resp.status_code}: {resp.text[:200]}")
ValueError: unexpected status 502: upstream timed out after 30000 ms (request 7f3c9a1e-22b1-4c55-9d0e-1f2a3b4c5d6e)
'''
    LOG = "2025-03-14T09:{m:02d}:{s:02d}.{ms:03d}Z INFO worker-{w} processed batch {b} in {t:.2f}s (queue depth {q}, version 2.4.{v})\n"

    def trajectory(self) -> Trajectory:
        r, f = self.rng, self.fake
        loc = r.choice(NAME_LOCALES)
        person = f[loc].name()
        email, phone = f["en_US"].email(), f[r.choice(PHONE_LOCALES)].phone_number()
        addr = f[loc].address().replace("\n", ", ")
        logs = "".join(self.LOG.format(m=r.randrange(60), s=r.randrange(60), ms=r.randrange(1000), w=r.randrange(8),
                                       b=r.randrange(10**5), t=r.random() * 5, q=r.randrange(500), v=r.randrange(20))
                       for _ in range(r.randrange(8, 20)))
        rows = [{"id": r.randrange(10**6), "name": f[r.choice(NAME_LOCALES)].name(), "plan": r.choice(["pro", "free"]),
                 "mrr": round(r.random() * 500, 2), "created": f["en_US"].date_this_decade().isoformat()}
                for _ in range(r.randrange(3, 8))]
        messages = [
            Message(role="system", content="You are a coding agent. Use the tools to inspect and fix the repository."),
            Message(role="user", content=f"Hi, I'm {person} ({email}, {phone}). The nightly job fails since the "
                                         f"last deploy; customers at {addr} got duplicate invoices. Can you fix it?"),
            Message(role="assistant", content="Let me look at the code and the logs first.",
                    tool_calls=[ToolCall(id="call_1", function=ToolCallFunction(
                        name="read_file", arguments=json.dumps({"path": "app/users.py"})))]),
            Message(role="tool", tool_call_id="call_1", content=self.CODE),
            Message(role="assistant", content=None, tool_calls=[ToolCall(id="call_2", function=ToolCallFunction(
                name="run", arguments=json.dumps({"cmd": "tail -n 200 /var/log/worker.log"})))]),
            Message(role="tool", tool_call_id="call_2", content=logs + self.TRACE),
            Message(role="assistant", content=None, tool_calls=[ToolCall(id="call_3", function=ToolCallFunction(
                name="query", arguments=json.dumps({"sql": "SELECT id, name, plan, mrr, created FROM customers LIMIT 5"})))]),
            Message(role="tool", tool_call_id="call_3", content=json.dumps(rows, indent=2)),
            Message(role="assistant", content="The retry in `process` re-sends a batch after a 502 without an "
                                              "idempotency key, so invoices are created twice. I added the key "
                                              "and a test; `pytest -q` passes (42 passed in 3.1s)."),
        ]
        steps = [Step(index=0, action="read_file app/users.py", observation=self.CODE[:400]),
                 Step(index=1, action="run tail", observation=logs[:600])]
        return Trajectory(task_id=f"ticket-{r.randrange(10**5)}", model="policy", messages=messages, steps=steps,
                          metadata={"user": {"email": email, "plan": "pro"}, "region": "eu-west-1"})


# ---------------------------------------------------------------------------------------------
# Systems


def build_presidio() -> Any:
    """An AnalyzerEngine on a blank spaCy pipeline; raises if Presidio cannot run offline."""
    import spacy
    import tldextract
    import tldextract.tldextract as tldmod
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    # Email validation calls tldextract.extract, which otherwise fetches the public suffix list.
    tldmod.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": "blank"}])
    engine.nlp = {"en": spacy.blank("en")}  # what load() would set; no model download
    analyzer = AnalyzerEngine(nlp_engine=engine, supported_languages=["en"])
    analyzer.analyze("warm up a@b.com 10.0.0.1", language="en", entities=PRESIDIO_ENTITIES)
    return analyzer


def presidio_raw(analyzer: Any, text: str) -> list[tuple[str, int, int]]:
    res = analyzer.analyze(text, language="en", entities=PRESIDIO_ENTITIES)
    return [(r.entity_type, r.start, r.end) for r in res]


def map_presidio(raw: list[tuple[str, int, int]], text: str, gold: tuple[Span, ...]) -> list[Span]:
    out = []
    for etype, s, e in raw:
        if etype == "IP_ADDRESS":
            hit = [g.kind for g in gold if g.kind in ("IPV4", "IPV6") and g.start < e and s < g.end]
            kind = hit[0] if hit else ("IPV6" if ":" in text[s:e] else "IPV4")
        else:
            kind = PRESIDIO_MAP.get(etype)
            if kind is None:
                continue
        out.append(Span(kind, s, e))
    return out


# ---------------------------------------------------------------------------------------------
# Scoring


def timed(fn: Any, texts: list[Any], repeats: int, before: Any = None) -> float:
    """Best-of-`repeats` CPU seconds of this process to process every text once (`before()` runs
    untimed before each pass). CPU time, not wall time: both systems are single-threaded, and on a
    shared machine wall time mostly measures the neighbours."""
    best = float("inf")
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.process_time()
        for t in texts:
            fn(t)
        best = min(best, time.process_time() - t0)
    return best


# ---------------------------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for h in header:
            table.add_column(h, justify="left" if h == "type" else "right")
        for row in rows:
            table.add_row(*row)
        Console(width=max(120, Console().width)).print(table)
    except ImportError:
        print(title)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for row in rows:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def ingest_trajectories(anonymizer: Anonymizer, n: int) -> dict[str, Any]:
    """CPU milliseconds per `anonymize_trajectory` on bench/collector.py's 4 KB trajectories (what
    `POST /v1/trajectories` anonymizes), best of 3, each pass after 300 other trajectories warmed
    the caches as a running collector's would be."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_collector", ROOT / "bench" / "collector.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_collector"] = mod
    spec.loader.exec_module(mod)
    trajs, warm = mod.make_trajectories(n, 5), mod.make_trajectories(300, 77, prefix="w")
    kb = sum(len(t.model_dump_json()) for t in trajs) / n / 1e3

    def before() -> None:
        anonymizer.clear_cache()
        for t in warm:
            anonymizer.trajectory(t)

    best = timed(anonymizer.trajectory, trajs, repeats=3, before=before)
    return {"n": n, "json_kb_each": round(kb, 2), "ms_per_trajectory": best / n * 1e3, "per_second": n / best}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--trajectories", type=int, default=120, help="realistic trajectories for the MB/s row")
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "anonymize.json")
    ap.add_argument("--no-presidio", action="store_true", help="benchmark looplift alone")
    ap.add_argument("--no-train", action="store_true", help="reuse the cached name model instead of timing a fresh build")
    ap.add_argument("--ingest-trajectories", type=int, default=1000,
                    help="4 KB trajectories (bench/collector.py's) for the per-trajectory time")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    # ---- the name model: trained here (timed) unless --no-train
    config = _names.NameModelConfig()
    if args.no_train:
        t0 = time.perf_counter()
        name_model = _names.load_name_model(config)
        train_info: dict[str, Any] = {"trained_here": False, "load_seconds": time.perf_counter() - t0}
    else:
        t0 = time.perf_counter()
        model = _names.train(config)
        train_info = {"trained_here": True, **model["stats"], "train_seconds": time.perf_counter() - t0,
                      "cpu_count": os.cpu_count(), "config_key": config.key()}
        name_model = _names.NameModel(model)
    anonymizer = Anonymizer()
    anonymizer._name_model = name_model  # the model just built, not a second copy from the cache

    def detect(text: str) -> list[Span]:
        return [Span(kind, s, e) for s, e, kind, _key in anonymizer.detect(text)]

    samples = Gen(args.seed).dataset(args.n)
    texts = [s.text for s in samples]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    n_clean = sum(1 for s in samples if not s.gold)

    ll_preds = [detect(t) for t in texts]
    ll_score = score(samples, ll_preds, KINDS)
    # The name model memoizes per-word feature sums. Before each timed pass the memo is emptied and
    # refilled from other text (another seed), as in a running collector: common words are known,
    # the names and values in the timed text are new. `cold` also forgets the common words.
    warm_texts = [s.text for s in Gen(args.seed + 1000).dataset(1000)]

    def steady() -> None:
        anonymizer.clear_cache()  # the span memo too: every timed pass starts with no string known
        for t in warm_texts:
            name_model.find(t)

    def cold() -> None:
        anonymizer.clear_cache()

    ll_time = timed(anonymizer.text, texts, repeats=5, before=steady)
    ll_time_cold = timed(anonymizer.text, texts, repeats=3, before=cold)

    # ---- realistic trajectories
    gen_t = Gen(args.seed + 1)
    trajs = [gen_t.trajectory() for _ in range(args.trajectories)]
    traj_bytes = sum(len(t.model_dump_json().encode()) for t in trajs) / 1e6
    traj_time = timed(anonymizer.trajectory, trajs, repeats=3, before=steady)
    traj_strings = [m.content for t in trajs for m in t.messages if m.content]
    traj_text_mb = sum(len(s.encode()) for s in traj_strings) / 1e6
    traj_text_time = timed(anonymizer.text, traj_strings, repeats=3, before=steady)

    pr_score: dict[str, Any] | None = None
    pr_time: float | None = None
    pr_traj_mbps: float | None = None
    pr_error: str | None = None
    if not args.no_presidio:
        try:
            analyzer = build_presidio()
        except Exception as exc:  # report looplift alone
            pr_error = f"{type(exc).__name__}: {exc}"
        else:
            raw = [presidio_raw(analyzer, t) for t in texts]
            pr_preds = [map_presidio(r, s.text, s.gold) for r, s in zip(raw, samples)]
            pr_score = score(samples, pr_preds, PRESIDIO_KINDS)
            pr_time = timed(lambda t: presidio_raw(analyzer, t), texts, repeats=2)
            sub = traj_strings[: max(1, len(traj_strings) // 4)]
            pr_traj_mbps = sum(len(s.encode()) for s in sub) / 1e6 / timed(lambda t: presidio_raw(analyzer, t), sub, 1)

    # ---- the trigger fallback (no hyperscan): same sentences, same results, its speed
    backend = _pii_scan.backend()
    fallback_mbps: float | None = None
    if backend == "hyperscan":
        _pii_scan.use_backend("python")
        try:
            assert [detect(t) for t in texts[:500]] == ll_preds[:500], "fallback disagrees with hyperscan"
            fallback_mbps = mb / timed(anonymizer.text, texts, repeats=3, before=steady)
        finally:
            _pii_scan.use_backend("hyperscan")

    # ---- what ingest sees: bench/collector.py's 4 KB trajectories, one at a time
    ingest = ingest_trajectories(anonymizer, args.ingest_trajectories)

    # ---- the independent evaluation set (hand-written + Mimesis), dev and hold-out
    independent = {split: anonymize_eval.evaluate(detect, split) for split in ("dev", "holdout")}

    ll_mbps = mb / ll_time
    pr_mbps = mb / pr_time if pr_time else None
    ratio = ll_mbps / pr_mbps if pr_mbps else None
    traj_text_mbps = traj_text_mb / traj_text_time
    traj_ratio = traj_text_mbps / pr_traj_mbps if pr_traj_mbps else None

    # ---- tables
    rows = []
    for k in KINDS:
        m = ll_score["per_type"][k]
        p = pr_score["per_type"].get(k) if pr_score else None
        rows.append((k, str(m["gold"]), fmt(m["precision"]), fmt(m["recall"]), fmt(m["char_recall"]),
                     fmt(p["precision"]) if p else "—", fmt(p["recall"]) if p else "—",
                     "yes" if m["meets_target"] else "NO"))
    header = ("type", "gold", "looplift P", "looplift R", "chars covered", "presidio P", "presidio R", "meets target")
    print_table(f"Anonymizer benchmark (n={args.n}, seed={args.seed}, {n_clean} no-PII sentences)", header, rows)
    for k in ("PHONE", "CREDIT_CARD", "IBAN", "SSN", "DOB", "SECRET", "PERSON", "ADDRESS"):
        for name, sc in (("looplift", ll_score), ("presidio", pr_score)):
            by = sc["per_type"][k].get("recall_by_format") if sc and k in sc["per_type"] else None
            if by:
                cells = ", ".join(f"{sub} {v['recall']:.2f} ({v['gold']})" for sub, v in by.items())
                print(f"{k} recall by format, {name}: {cells}")
    unseen = {}
    for k in FREEFORM:
        by = ll_score["per_type"][k].get("recall_by_format", {})
        seen_g = sum(v["gold"] for s, v in by.items() if s not in UNSEEN_LOCALES)
        seen_h = sum(v["gold"] * v["recall"] for s, v in by.items() if s not in UNSEEN_LOCALES)
        un_g = sum(v["gold"] for s, v in by.items() if s in UNSEEN_LOCALES)
        un_h = sum(v["gold"] * v["recall"] for s, v in by.items() if s in UNSEEN_LOCALES)
        unseen[k] = {"training_locales": round(seen_h / seen_g, 4) if seen_g else None,
                     "unseen_locales": round(un_h / un_g, 4) if un_g else None, "unseen": list(UNSEEN_LOCALES)}
        print(f"{k} recall: locales in training {fmt(unseen[k]['training_locales'])}, "
              f"never seen ({', '.join(UNSEEN_LOCALES)}) {fmt(unseen[k]['unseen_locales'])}")
    print(f"false positives on no-PII sentences: looplift {ll_score['false_positives_on_clean_samples']}"
          + (f", presidio {pr_score['false_positives_on_clean_samples']}" if pr_score else ""))
    print(f"throughput on the sentences ({mb:.3f} MB): looplift {ll_mbps:.2f} MB/s ({mb / ll_time_cold:.2f} MB/s with a "
          "cold word cache)"
          + (f", presidio {pr_mbps:.4f} MB/s, ratio {ratio:.1f}x (target >= {TARGET_SPEEDUP:.0f}x)" if ratio else ""))
    print(f"throughput on realistic trajectories ({args.trajectories}, {traj_bytes:.2f} MB as JSON): "
          f"anonymize_trajectory {traj_bytes / traj_time:.2f} MB/s; their message text ({traj_text_mb:.2f} MB) "
          f"{traj_text_mbps:.2f} MB/s" + (f", presidio {pr_traj_mbps:.4f} MB/s, ratio {traj_ratio:.0f}x" if traj_ratio else ""))
    print(f"4 KB trajectories (bench/collector.py's, {ingest['n']}): anonymize_trajectory {ingest['ms_per_trajectory']:.3f} ms "
          f"each, {ingest['per_second']:.0f}/s in one process (CPU time; trigger backend: {backend}"
          + (f"; the pure-Python fallback runs the sentences at {fallback_mbps:.2f} MB/s)" if fallback_mbps else ")"))
    for split, res in independent.items():
        print_table(f"Independent set, {split} split ({res['n']}; headline = hand-written + Mimesis Latin-script)",
                    anonymize_eval.TABLE_HEADER, anonymize_eval.table_rows(res))
    if train_info.get("trained_here"):
        print(f"name model: trained in {train_info['train_seconds']:.1f} s on {os.cpu_count()} CPUs "
              f"({train_info['sentences']} sentences, {train_info['tokens']} tokens, {train_info['features']} features)")
    if pr_error:
        print(f"presidio not run: {pr_error}")

    types_ok = all(ll_score["per_type"][k]["meets_target"] for k in KINDS)
    independent_ok = {split: res["targets_met"] for split, res in independent.items()}
    speed_ok = ratio is not None and ratio >= TARGET_SPEEDUP
    result = {
        "n": args.n,
        "seed": args.seed,
        "n_no_pii_sentences": n_clean,
        "n_gold_spans": sum(len(s.gold) for s in samples),
        "bytes": round(mb * 1e6),
        "targets": {"recall": TARGET_RECALL, "precision": TARGET_PRECISION, "name_recall": TARGET_NAME_RECALL,
                    "speedup": TARGET_SPEEDUP},
        "looplift": {**ll_score, "seconds": ll_time, "mb_per_s": ll_mbps, "mb_per_s_cold_word_cache": mb / ll_time_cold,
                     "us_per_sentence": ll_time / len(texts) * 1e6, "recall_by_locale_seen": unseen},
        "presidio": (
            {**pr_score, "seconds": pr_time, "mb_per_s": pr_mbps, "us_per_sentence": pr_time / len(texts) * 1e6,
             "entities_requested": PRESIDIO_ENTITIES,
             "nlp": "spacy.blank('en') (pattern recognizers only)",
             "not_supported": [k for k in KINDS if k not in PRESIDIO_KINDS]}
            if pr_score else {"error": pr_error or "skipped (--no-presidio)"}
        ),
        "throughput_ratio_looplift_over_presidio": ratio,
        "trajectories": {
            "n": args.trajectories, "json_mb": traj_bytes, "anonymize_trajectory_mb_per_s": traj_bytes / traj_time,
            "message_text_mb": traj_text_mb, "message_text_mb_per_s": traj_text_mbps,
            "presidio_message_text_mb_per_s": pr_traj_mbps, "ratio": traj_ratio,
        },
        "trigger_backend": backend,
        "fallback_python_triggers_mb_per_s": fallback_mbps,
        "ingest_4kb_trajectories": ingest,
        "independent": independent,
        "name_model": train_info,
        "targets_met": {
            "per_type": {k: ll_score["per_type"][k]["meets_target"] for k in KINDS},
            "all_types": types_ok,
            "independent": independent_ok,
            "speedup": speed_ok,
            "all": types_ok and speed_ok and all(independent_ok.values()),
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
        },
        "wall_seconds": time.perf_counter() - t_start,
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
