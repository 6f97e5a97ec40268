"""A week in an hour: the whole product driven as a user drives it, with faults at seeded random moments, then
every invariant read back (bench/_soak_invariants.py).

    .venv/bin/python bench/soak.py --cycles 3 --minutes 20 [--seed 0] [--faults 6] [--postgres-url URL]
                                   [--json-out bench/results/soak.json]

In a temporary LOOPLIFT_HOME (a small tmpfs when run as root, so the disk can fill up), on loopback only:

- `looplift up --capture` serves the embedded default model (the cached base model; one a test session already
  built is copied in when found, else `trainer build-base` builds it);
- a black-box app (the official `openai` client, several threads) runs the arithmetic task as conversations:
  `X-Looplift-Session`/`-App`/`-Task` headers, a tool call in its history on some, streamed turns on others, and
  feedback by response id (`POST /v1/feedback`: a rating of the answer, and a correction of the code turn when
  it miscopied the expression). Every attempt goes into a client-side ledger (status, response id, the version
  that answered); it retries what failed at the transport or with a 5xx for up to `--retry-s`, as an app behind
  a flaky network does;
- each cycle runs one retrain job through its new-data trigger (`trainer schedule --new-data N --max-runs 1`), on
  a suite of held-out arithmetic prompts, some cycles with a canary (`[trainer] canary`); `trainer canary watch`
  runs beside the stack as an operator runs it;
- faults at seeded moments, each logged with its time and kind: SIGKILL of vLLM, of `looplift up` (the gateway and
  the collector are threads of it) during a canary, during a promote and mid-ingest, of `collector export`
  mid-export, of the trainer mid-train and mid-publish, a Postgres restart (with `--postgres-url`: every backend
  of the database terminated), the home's disk filled and freed, and (with `--step-clock`, as root) a clock jump:
  this machine's wall clock stepped a day forward or back and, at a later jump, back again, as an NTP step after
  a suspend or a bad time source does. After each kill the killed part is brought back the way an operator would
  (or the product brings it back; the log says which);
- at the end the stack is stopped with SIGTERM and the invariants are checked; the report is a table on stdout and
  the JSON at `--json-out`.

The soak's own times (the ledger, kill times) come from the monotonic clock, so a clock jump does not move them;
the invariant checker maps the product's wall-clock stamps back through the recorded steps (whole days, longer
than any soak, so the mapping is unique). The clock is stepped back to where it would be when the soak ends,
fails or is interrupted (a SIGKILL of the soak itself leaves it stepped: `date -s` puts it right).
libfaketime, which would step one process's clock only, hangs Python 3.12's timed waits (`Event.wait` under its
faked monotonic clock, `EINVAL` from `time.sleep` without it), so the step is the machine's.

Deliberately not here: judging the model's quality (the gate does), load testing (bench/gateway.py), and GPU runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Any, Callable, Optional

import httpx
import openai

# The repo first: bench/ (on the path as the script's folder, for _soak_invariants) holds collector.py and sandboxes.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests/_bench.py): _soak_invariants too
    sys.path.insert(1, str(Path(__file__).resolve().parent))

import _soak_invariants as inv  # noqa: E402  (after the path: bench scripts run from anywhere)
from sdk.infra import env_without_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
APP = "soak-app"
#: Fault kinds, in the order the report lists them.
KINDS = ("vllm_kill", "gateway_kill_canary", "gateway_kill_promote", "collector_kill_ingest", "collector_kill_export",
         "trainer_kill_train", "trainer_kill_publish", "postgres_restart", "disk_full", "clock_jump")
#: After a full disk frees, this long before the cycle's next fault (ten of the collector client's flushes: CI is slow).
DISK_SETTLE_S = 5.0
#: Kinds that fire at a time in the cycle; the others wait for a moment (a stage, a running canary).
TIMED = ("vllm_kill", "collector_kill_ingest", "collector_kill_export", "postgres_restart", "disk_full", "clock_jump")
#: A clock jump steps the wall clock by this much (or back to true time): longer than any soak, see the docstring.
CLOCK_STEP_S = 86400.0
CALC_TOOL = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an integer expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


_T0_WALL, _T0_MONO = time.time(), time.monotonic()


def true_time() -> float:
    """Epoch seconds that no clock step moves: the wall clock at the soak's start plus monotonic time since."""
    return _T0_WALL + time.monotonic() - _T0_MONO


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def _expr(rng: random.Random) -> tuple[str, int]:
    """The demo task's expressions (envs/_arithmetic.py): 2 or 3 operands in 1..99, + - *."""
    expr = str(rng.randint(1, 99))
    for _ in range(rng.choice((1, 2))):
        expr += rng.choice("+-*") + str(rng.randint(1, 99))
    return expr, _calc(expr)


_CODE = re.compile(r"print\(([-+* 0-9]+)\)")


def _calc(expr: str) -> int:
    """The app's own "sandbox": only integer + - * expressions, nothing else is ever evaluated."""
    if not re.fullmatch(r"[-+* 0-9]+", expr):
        raise ValueError(f"not an integer expression: {expr!r}")
    return int(eval(expr, {"__builtins__": {}}))  # noqa: S307 - checked to be digits and + - * only


# ---- the home and the model ---------------------------------------------------------------------------
class Home:
    """The soak's LOOPLIFT_HOME: a tmpfs of `size` bytes when we may mount one (so the disk can fill), else a
    plain temp dir; the base model and the anonymizer's name model are copied in when a built one exists."""

    def __init__(self, size: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="looplift-soak-"))
        self.path = self.root / "home"
        self.path.mkdir()
        self.mounted = False
        self.why_no_tmpfs = ""
        if os.geteuid() != 0:
            self.why_no_tmpfs = "not root: cannot mount a tmpfs"
        else:
            p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(self.path)],
                               capture_output=True, text=True)
            self.mounted = p.returncode == 0
            self.why_no_tmpfs = "" if self.mounted else f"mount failed: {p.stderr.strip()}"
        self.filler = self.path / "soak-filler"
        self.env = env_without_config()
        self.env["LOOPLIFT_HOME"] = str(self.path)
        self.marker = f"LOOPLIFT_HOME={self.path}"

    def seed_models(self, model: Optional[Path], name_model: Optional[Path] = None) -> str:
        """Put a base model in the home's cache (`model`, else one a test session built, else built here) and the
        anonymizer's name model (`name_model`, else one a test session trained, else the collector trains it);
        returns how the base model got there."""
        from trainer import base_model_dir

        with _env("LOOPLIFT_HOME", str(self.path)):
            target = base_model_dir()
        names_found = glob("/tmp/pytest-of-*/*/looplift_home/models/anonymizer-names-*")
        for names in [str(name_model)] if name_model else sorted(names_found, key=os.path.getmtime):
            if (Path(names) / "model.json").is_file():
                shutil.copytree(names, self.path / "models" / Path(names).name, dirs_exist_ok=True)
        found = sorted(glob("/tmp/pytest-of-*/*/looplift_base_model*/model/config.json"), key=os.path.getmtime)
        built = [model] if model is not None else [Path(p).parent for p in reversed(found)]
        if built:
            shutil.copytree(built[0], target)
            return f"copied from {built[0]}"
        p = subprocess.run([str(BIN / "trainer"), "build-base"], env=self.env, capture_output=True, text=True,
                           timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"error: `trainer build-base` failed: {p.stderr.strip()[-500:]}")
        return "built by `trainer build-base`"

    def fill(self) -> None:
        with self.filler.open("ab", buffering=0) as f:
            with contextlib.suppress(OSError):
                while f.write(b"\0" * (1 << 16)):
                    pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remove(self, keep_root: bool = False) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False
        if not keep_root:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def _env(key: str, value: str):  # type: ignore[no-untyped-def]
    before = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


# ---- processes -----------------------------------------------------------------------------------------
class Proc:
    """One product command in its own session, output to a log (and, with `watch`, each line to a callback)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path,
                 watch: Optional[Callable[[str], None]] = None) -> None:
        self.name, self.log = name, log
        out = log.open("a")
        out.write(f"---- {time.strftime('%H:%M:%S')} {' '.join(args)}\n")
        out.flush()
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE if watch else out,
                                     stderr=subprocess.STDOUT, start_new_session=True, text=True)
        self._out = out
        if watch is not None:
            threading.Thread(target=self._pump, args=(watch,), daemon=True).start()

    def _pump(self, watch: Callable[[str], object]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._out.write(line)
            self._out.flush()
            watch(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 120) -> Optional[int]:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


class Stack:
    """`looplift up --capture` on fixed loopback ports, restartable."""

    def __init__(self, home: Home, logs: Path, db_url: Optional[str]) -> None:
        self.home, self.logs = home, logs
        self.gw_port, self.col_port = free_port(), free_port()
        self.gateway = f"http://127.0.0.1:{self.gw_port}"
        self.collector = f"http://127.0.0.1:{self.col_port}"
        self.env = dict(home.env)
        if db_url:
            self.env["LOOPLIFT_COLLECTOR_DB"] = db_url
        self.proc: Optional[Proc] = None
        self.vllm_ports: set[int] = set()
        self.starts = 0
        self.windows: list[tuple[float, float]] = []
        """(started, healthy) epoch times of every start of `looplift up`."""

    def start(self, timeout: float = 600) -> None:
        started = true_time()
        self.proc = Proc("up", [str(BIN / "looplift"), "up", "--capture", "--gateway-port", str(self.gw_port),
                                "--collector-port", str(self.col_port)], self.env, self.logs / "up.log")
        self.starts += 1
        if not wait_for(lambda: self.healthy() or not self.proc.alive(), timeout, 1.0) or not self.healthy():  # type: ignore[union-attr]
            raise RuntimeError(f"looplift up did not become healthy; see {self.logs / 'up.log'}:\n"
                               + (self.logs / "up.log").read_text(errors="replace")[-2000:])
        self.windows.append((started, true_time()))
        for r in self.replicas():
            self.vllm_ports.add(int(str(r["url"]).rsplit(":", 1)[1].split("/")[0]))

    def token(self) -> str:
        return (self.home.path / "admin.token").read_text().strip()

    def healthy(self) -> bool:
        try:
            g = httpx.get(f"{self.gateway}/health", timeout=3)
            c = httpx.get(f"{self.collector}/health", timeout=3)
            return g.status_code == 200 and g.json().get("status") == "ok" and c.status_code == 200
        except (httpx.HTTPError, ValueError):
            return False

    def admin(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(method, f"{self.gateway}{path}", headers={"Authorization": f"Bearer {self.token()}"},
                          timeout=30, **kw)
        r.raise_for_status()
        return r.json()

    def replicas(self) -> list[dict[str, Any]]:
        try:
            return list(self.admin("GET", "/admin/replicas"))
        except (httpx.HTTPError, OSError, ValueError):
            return []

    def sigkill(self) -> None:
        assert self.proc is not None
        self.proc.kill()

    def wait_gone(self, timeout: float = 90) -> bool:
        """The killed stack's ports are free again (vLLM dies with its tied guardian, within its grace)."""
        ports = [self.gw_port, self.col_port, *self.vllm_ports]
        return wait_for(lambda: not any(inv.listening(p) for p in ports), timeout)

    def restart_after_kill(self) -> str:
        t0 = time.monotonic()
        gone = self.wait_gone()
        self.start()
        return f"operator restarted `looplift up` ({'ports freed' if gone else 'ports NOT freed in 90 s'}; healthy " \
               f"{time.monotonic() - t0:.0f} s after the kill)"

    def stop(self) -> Optional[int]:
        return self.proc.stop() if self.proc is not None else None


# ---- the app ---------------------------------------------------------------------------------------------
@dataclass
class Ledger:
    """Every attempt the app made; thread-safe appends."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    t0: float = field(default_factory=true_time)

    def add(self, **row: Any) -> dict[str, Any]:
        row["t"] = true_time() - self.t0
        with self.lock:
            self.rows.append(row)
        return row


class App:
    """The black-box app: conversations through the gateway with the official client, feedback by response id."""

    def __init__(self, gateway: str, ledger: Ledger, seed: int, threads: int, retry_s: float, think_s: float) -> None:
        self.gateway, self.ledger, self.retry_s, self.think_s = gateway, ledger, retry_s, think_s
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i, seed * 1000 + i), daemon=True, name=f"app-{i}")
                        for i in range(threads)]
        self.sessions = 0

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self, timeout: float = 300) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout)

    def _run(self, idx: int, seed: int) -> None:
        rng = random.Random(seed)
        client = openai.OpenAI(base_url=f"{self.gateway}/v1", api_key="soak", max_retries=0, timeout=120)
        n = 0
        while not self.stop_event.is_set():
            n += 1
            self.sessions += 1
            session = f"soak-{idx}-{n}-{rng.getrandbits(32):08x}"
            try:
                self._conversation(client, rng, session)
            except Exception as e:  # noqa: BLE001 - a bug in one conversation must not stop the app; it is reported
                self.ledger.add(kind="app_error", rid=session, attempt=1, session=session, status=None,
                                error=f"{type(e).__name__}: {e}"[:300], response_id=None, version=None, final=True)
            self.stop_event.wait(rng.uniform(0, 2 * self.think_s))
        client.close()

    def _call(self, kind: str, session: str, fn: Callable[[], tuple[int, Optional[str], Optional[str], Any]]) -> Any:
        """Attempt `fn` until a final answer or `retry_s`; ledger every attempt. Returns the payload or None."""
        rid = f"{session}:{kind}:{time.time_ns()}"
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            status: Optional[int] = None
            error: Optional[str] = None
            response_id = version = None
            payload: Any = None
            try:
                status, response_id, version, payload = fn()
                if status >= 300:
                    error = str(payload)
            except openai.APIStatusError as e:
                status, error = e.status_code, str(e.message)[:200]
            except (openai.APIConnectionError, openai.APITimeoutError, httpx.HTTPError) as e:
                error = f"{type(e).__name__}: {str(e)[:160]}"
            ok = status is not None and 200 <= status < 300
            retry = (status is None or status >= 500 or (kind == "feedback" and status == 404)) and not ok
            # Once the app is stopping, what is still failing gets ~20 s more (the stack is up by then).
            give_up = self.retry_s if not self.stop_event.is_set() else min(self.retry_s, 20.0)
            done = ok or not retry or time.monotonic() - start > give_up
            self.ledger.add(kind=kind, rid=rid, attempt=attempt, session=session, status=status, error=error,
                            response_id=response_id, version=version, final=done)
            if done:
                return payload if ok else None
            time.sleep(min(0.5 * 2 ** min(attempt, 4), 5.0))

    def _chat(self, client: openai.OpenAI, session: str, task: str, messages: list[dict[str, Any]],
              stream: bool, tools: bool) -> Optional[tuple[str, str]]:
        headers = {"X-Looplift-Session": session, "X-Looplift-App": APP, "X-Looplift-Task": task}
        extra: dict[str, Any] = {"tools": [CALC_TOOL], "tool_choice": "auto"} if tools else {}

        def once() -> tuple[int, Optional[str], Optional[str], Any]:
            if stream:
                with client.chat.completions.with_streaming_response.create(
                        model="policy", messages=messages, max_tokens=24, stream=True,  # type: ignore[arg-type]
                        extra_headers=headers, **extra) as raw:
                    text, rid = "", None
                    for chunk in raw.parse():
                        rid = chunk.id
                        if chunk.choices and chunk.choices[0].delta.content:
                            text += chunk.choices[0].delta.content
                    return raw.http_response.status_code, rid, raw.headers.get("x-looplift-version"), (rid, text)
            raw = client.chat.completions.with_raw_response.create(
                model="policy", messages=messages, max_tokens=24, extra_headers=headers, **extra)  # type: ignore[arg-type]
            r = raw.parse()
            return raw.http_response.status_code, r.id, raw.headers.get("x-looplift-version"), \
                (r.id, r.choices[0].message.content or "")

        return self._call("chat", session, once)  # type: ignore[no-any-return]

    def _conversation(self, client: openai.OpenAI, rng: random.Random, session: str) -> None:
        expr, value = _expr(rng)
        task = f"arith:{expr}"
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Compute: {expr}"}]
        tools = rng.random() < 0.35
        if tools:  # the app ran the calculator itself first: a tool call and its result in the history
            messages += [{"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function", "function": {"name": "calculate",
                                                                 "arguments": json.dumps({"expression": expr})}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": str(value)}]
        first = self._chat(client, session, task, messages, stream=rng.random() < 0.25, tools=tools)
        if first is None or self.stop_event.is_set():
            return
        code = _CODE.search(first[1])  # run the model's code as the demo's sandbox would, and show it the output
        if code is None or code.group(1).replace(" ", "") != expr.replace(" ", ""):
            # The user corrects the step that went wrong (by its response id), with the code it should have written.
            # (A correction of the final answer would be exported as prompt + answer, the tool step dropped: see the
            # collector's `sft_line`; it would teach the model to skip the code.)
            self._feedback(session, first[0], {"response_id": first[0], "rating": -1.0,
                                               "correction": f"```python\nprint({expr})\n```"})
        try:
            output = f"Output: {_calc(code.group(1))}" if code else "Output: Error: no ```python block with print(...)"
        except (ValueError, SyntaxError) as e:
            output = f"Output: Error: {type(e).__name__}"
        messages += [{"role": "assistant", "content": first[1]}, {"role": "user", "content": output}]
        final = self._chat(client, session, task, messages, stream=rng.random() < 0.25, tools=tools)
        if final is None or rng.random() < 0.15:  # some users never react
            return
        right = re.search(rf"Answer:\s*{re.escape(str(value))}\b", final[1]) is not None
        self._feedback(session, final[0], {"response_id": final[0], "rating": 1.0 if right else -1.0})

    def _feedback(self, session: str, rid: str, body: dict[str, Any]) -> None:
        def feedback() -> tuple[int, Optional[str], Optional[str], Any]:
            r = httpx.post(f"{self.gateway}/v1/feedback", json=body, timeout=30)
            return r.status_code, rid, None, r.text[:200] if r.status_code >= 300 else True

        self._call("feedback", session, feedback)


# ---- faults ----------------------------------------------------------------------------------------------
def spread(picks: list[str], cycles: int) -> list[list[str]]:
    """The fault kinds per cycle: pick i goes to cycle i mod `cycles`, or to the next cycle that does not have
    its kind yet (two of one kind in a cycle would fire at one moment: one fault counted twice)."""
    per: list[list[str]] = [[] for _ in range(cycles)]
    for i, kind in enumerate(picks):
        c = next((c for c in ((i + j) % cycles for j in range(cycles)) if kind not in per[c]), i % cycles)
        per[c].append(kind)
    return per


class Soak:
    """The run: home, stack, app, cycles, faults, and the facts the invariant checker reads."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.home = Home(args.tmpfs_mb << 20)
        self.logs = self.home.root / "logs"
        self.logs.mkdir()
        self.db_url = args.postgres_url or f"sqlite:///{self.home.path / 'collector.db'}"
        self.stack = Stack(self.home, self.logs, args.postgres_url)
        self.ledger = Ledger()
        self.faults: list[dict[str, Any]] = []
        self.canary_kills: list[dict[str, Any]] = []
        self.kill_times: dict[str, float] = {}
        self.left_loaded: list[str] = []
        self.up_kills: list[float] = []
        """Ledger times at which `looplift up` (gateway + collector) was SIGKILLed."""
        self.cycles: list[dict[str, Any]] = []
        self.operator: list[str] = []
        self.sessions: set[int] = set()
        self.pids: set[int] = set()
        self.trainer: Optional[Proc] = None
        self.watch: Optional[Proc] = None
        self.stage = ""
        self._stage_hooks: list[tuple[str, Callable[[], object]]] = []
        self._lock = threading.Lock()
        self.suite = self.home.root / "suite.jsonl"
        self.t0 = true_time()
        self.clock_offset = 0.0
        """How far this machine's wall clock is stepped from true time now (clock_jump)."""
        self.clock_steps: list[tuple[float, float]] = [(self.t0, 0.0)]
        """(true time, offset from then on): the start, then every clock step."""

    # -- bookkeeping
    def t(self) -> float:
        return true_time() - self.t0

    def note_sessions(self) -> None:
        """Remember every session one of ours leads, so the end can find vLLM's retitled engine processes."""
        for p in filter(str.isdigit, os.listdir("/proc")):
            st = inv._stat(p)  # noqa: SLF001 - the checker's /proc reader, shared
            if st and st[3] == p and inv._environ_has(p, self.home.marker.encode()):  # noqa: SLF001
                self.sessions.add(int(p))

    def fault(self, kind: str, injected: bool, note: str, **extra: Any) -> dict[str, Any]:
        row = {"kind": kind, "t": round(self.t(), 1), "injected": injected, "note": note, **extra}
        self.faults.append(row)
        say(f"fault {kind}: {'injected' if injected else 'NOT injected'} - {note}")
        return row

    # -- configs
    def write_configs(self) -> tuple[Path, Path]:
        rng = random.Random(self.args.seed + 1)
        # The skill the app's feedback rewards: copying the expression into the code faithfully. The base model
        # miscopies now and then when it samples (as the demo's does), never greedily: the gate samples too.
        lines = [json.dumps({"suite": {"name": "soak-arith", "checker": r"regex:print\(([-+* 0-9]+)\)",
                                       "max_tokens": 24, "temperature": 1.0}})]
        for i in range(self.args.suite_tasks):
            expr, _value = _expr(rng)
            lines.append(json.dumps({"id": f"held-{i}", "turns": [f"Compute: {expr}"], "expected": f"print({expr})"}))
        self.suite.write_text("\n".join(lines) + "\n")
        base = (f'[trainer]\neval = "{self.suite}"\napp = "{APP}"\nmin_score = 0.75\nmin_examples = 2\n'
                f'eval_concurrency = 4\n{{canary}}\n[gate]\nalpha = {self.args.gate_alpha}\nslice_tolerance = 1.0\n'
                f'[sft]\nsteps = {self.args.sft_steps}\nlr = {self.args.sft_lr}\nbatch_size = {self.args.sft_batch}\n'
                f'[canary]\nmin_samples = 5\nmax_samples = 20\npoll = "2s"\nwatch = "2m"\nwatch_min_samples = 5\n')
        plain, canary = self.home.root / "plain.toml", self.home.root / "canary.toml"
        plain.write_text(base.format(canary=""))
        canary.write_text(base.format(canary="canary = 0.5"))
        return plain, canary

    # -- the trainer
    def _trainer_line(self, line: str) -> None:
        text = line.strip()
        for needle in ("exporting training data", "training (", "loading the candidate", "gate:",
                       "starting a canary", "promoting"):
            if needle in text:
                self.stage = needle
                with self._lock:
                    hooks = [h for h in self._stage_hooks if h[0] == needle]
                    self._stage_hooks = [h for h in self._stage_hooks if h[0] != needle]
                for _, hook in hooks:
                    threading.Thread(target=hook, daemon=True).start()

    def start_trainer(self, config: Path) -> Proc:
        args = [str(BIN / "trainer"), "schedule", "--config", str(config), "--new-data", str(self.args.new_data),
                "--max-runs", "1", "--poll", "2s", "--gateway", self.stack.gateway]
        if self.args.postgres_url:
            args += ["--db", self.args.postgres_url]
        self.stage = "waiting for new data"
        self.trainer = Proc("trainer", args, self.home.env, self.logs / "trainer.log", watch=self._trainer_line)
        self.pids.add(self.trainer.pid)
        return self.trainer

    def ensure_watch(self, config: Path) -> None:
        if self.watch is not None and self.watch.alive():
            return
        if self.watch is not None:
            self.operator.append(f"t={self.t():.0f}: `trainer canary watch` had exited ({self.watch.proc.returncode}); "
                                 "restarted")
        args = [str(BIN / "trainer"), "canary", "watch", "--config", str(config), "--gateway", self.stack.gateway]
        if self.args.postgres_url:
            args += ["--db", self.args.postgres_url]
        self.watch = Proc("watch", args, self.home.env, self.logs / "watch.log")
        self.pids.add(self.watch.pid)

    # -- faults
    def plan(self) -> list[list[str]]:
        """Per cycle, the fault kinds it injects: `--faults` picks spread round-robin over the cycles."""
        # Kinds this machine cannot inject are recorded once, with the reason, and take no slot of --faults.
        cannot = {}
        if not self.args.step_clock:
            cannot["clock_jump"] = "not asked for: it steps this machine's wall clock (pass --step-clock, as root)"
        elif os.geteuid() != 0:
            cannot["clock_jump"] = "not root: cannot step the wall clock"
        if not self.args.postgres_url:
            cannot["postgres_restart"] = "no --postgres-url: the collector runs on SQLite"
        if not self.home.mounted:
            cannot["disk_full"] = f"LOOPLIFT_HOME is not a tmpfs of ours ({self.home.why_no_tmpfs})"
        for kind, why in cannot.items():
            self.fault(kind, False, why)
        order = [k for k in KINDS if k not in cannot]
        self.rng.shuffle(order)
        if self.args.kinds:
            order = [k for k in self.args.kinds if k not in cannot] or order
        return spread([order[i % len(order)] for i in range(self.args.faults)], self.args.cycles)

    def inject_timed(self, kind: str) -> None:
        try:
            getattr(self, f"_do_{kind}")()
        except Exception as e:  # noqa: BLE001 - a fault that could not be made is recorded, not fatal
            self.fault(kind, False, f"injection failed: {type(e).__name__}: {e}")

    def _do_vllm_kill(self) -> None:
        reps = self.stack.replicas()
        pids = [r["pid"] for r in reps if r.get("pid")]
        if not pids:
            self.fault("vllm_kill", False, f"no vLLM pid from /admin/replicas ({reps})")
            return
        self.note_sessions()
        os.killpg(pids[0], signal.SIGKILL)
        row = self.fault("vllm_kill", True, f"SIGKILL to vLLM's process group {pids[0]}")
        t0 = time.monotonic()
        up = self.stack.proc
        assert up is not None
        back = wait_for(lambda: not up.alive() or any(r.get("pid") not in (None, pids[0]) and r.get("healthy")
                                                      for r in self.stack.replicas()) and self.stack.healthy(),
                        self.args.vllm_back_s, 1.0)
        if back and up.alive():
            row["restart"] = f"the gateway restarted vLLM itself ({time.monotonic() - t0:.0f} s)"
        elif not up.alive():
            row["restart"] = (f"`looplift up` exited by itself ({up.proc.returncode}) {time.monotonic() - t0:.0f} s after "
                              "vLLM died (one local vLLM: its death ends `up`, looplift/_cli.py); "
                              + self.stack.restart_after_kill())
        else:
            self.stack.stop()
            row["restart"] = (f"vLLM not back after {self.args.vllm_back_s:.0f} s and `up` still running; operator "
                              "stopped it (SIGTERM); " + self.stack.restart_after_kill())
        self.stack.vllm_ports |= {int(str(r["url"]).rsplit(":", 1)[1]) for r in self.stack.replicas()}
        self.operator.append(f"t={self.t():.0f}: vllm_kill: {row['restart']}")

    def _kill_up(self, kind: str, note: str) -> dict[str, Any]:
        self.note_sessions()
        assert self.stack.proc is not None
        self.kill_times[str(self.stack.proc.pid)] = true_time()
        self.up_kills.append(true_time() - self.ledger.t0)
        self.stack.sigkill()
        row = self.fault(kind, True, note)
        row["restart"] = self.stack.restart_after_kill()
        self.operator.append(f"t={self.t():.0f}: {kind}: {row['restart']}")
        return row

    def _do_collector_kill_ingest(self) -> None:
        self._kill_up("collector_kill_ingest", "SIGKILL to `looplift up` while the app's traffic is being captured "
                      "(the collector is a thread of `looplift up`: the gateway and vLLM go with it)")

    def _do_collector_kill_export(self) -> None:
        out = self.home.root / "export-killed.jsonl"
        p = Proc("export", [str(BIN / "collector"), "export", "--format", "sft", "--db", self.db_url, "--out", str(out)],
                 self.home.env, self.logs / "export.log")
        time.sleep(self.rng.uniform(0.5, 2.5))
        was_running = p.alive()
        p.kill()
        left = [x.name for x in out.parent.glob("export-killed*")]
        row = self.fault("collector_kill_export", was_running,
                         "SIGKILL to `collector export` mid-export" if was_running else
                         "`collector export` had already finished before the kill", left_files=left)
        row["restart"] = "ran again by the invariant checker (export twice)"

    def _do_postgres_restart(self) -> None:
        if not self.args.postgres_url:
            self.fault("postgres_restart", False, "no --postgres-url: the soak runs on SQLite")
            return
        import sqlalchemy as sa

        engine = sa.create_engine(self.args.postgres_url)
        with engine.connect() as conn:
            n = conn.execute(sa.text("select count(pg_terminate_backend(pid)) from pg_stat_activity "
                                     "where datname = current_database() and pid <> pg_backend_pid()")).scalar()
        engine.dispose()
        self.fault("postgres_restart", True, f"every other backend of the database terminated ({n}); a restart as "
                                             "clients see it (the server process itself is not ours to restart)")

    def _do_disk_full(self) -> None:
        if not self.home.mounted:
            self.fault("disk_full", False, f"LOOPLIFT_HOME is not a tmpfs of ours ({self.home.why_no_tmpfs})")
            return
        self.home.fill()
        st = os.statvfs(self.home.path)
        row = self.fault("disk_full", True, f"LOOPLIFT_HOME filled ({st.f_bavail * st.f_frsize} bytes free) for "
                                            f"{self.args.disk_full_s:.0f} s")
        time.sleep(self.args.disk_full_s)
        self.home.free()
        row["restart"] = f"freed at t={self.t():.0f}"
        # What was served while the disk was full could not be journaled: it waits in memory for the writers'
        # next flush (0.5 s) now that the disk is back, and a SIGKILL before that loses it (the documented limit,
        # docs/your-app.md). So the next fault of the cycle comes after that flush, not the moment the disk frees.
        time.sleep(DISK_SETTLE_S)

    def _do_clock_jump(self) -> None:
        # From true time a day forward or back; from a stepped clock back to true time (itself a step back or on).
        step = self.rng.choice((CLOCK_STEP_S, -CLOCK_STEP_S)) if self.clock_offset == 0 else -self.clock_offset
        self.step_clock(step)
        self.fault("clock_jump", True, f"this machine's wall clock stepped {step / 3600:+.0f} h (now {self.clock_offset / 3600:+.0f} h "
                                       f"from true time), with `trainer schedule` in stage {self.stage!r}")

    def step_clock(self, step: float) -> None:
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) + step)
        self.clock_offset += step
        self.clock_steps.append((true_time(), self.clock_offset))

    def restore_clock(self) -> None:
        """Step the wall clock back to true time (the end of the soak, however it ends)."""
        if self.clock_offset:
            self.step_clock(-self.clock_offset)
            self.operator.append(f"t={self.t():.0f}: the wall clock stepped back to true time")

    def arm_stage(self, kind: str, use_canary: bool) -> None:
        if kind == "trainer_kill_train":
            self._stage_hooks.append(("training (", lambda: self._kill_trainer(kind, "training")))
        elif kind == "trainer_kill_publish":
            # Publishing is loading the adapter into the gateway, then (gate passed) promoting it or starting its
            # canary; when the gate rejects, only the load comes.
            last = "starting a canary" if use_canary else "promoting"
            stage = last if self.rng.random() < 0.5 else "loading the candidate"
            self._stage_hooks.append((stage, lambda: self._kill_trainer(kind, stage)))
        elif kind == "gateway_kill_promote":
            self._stage_hooks.append(("promoting", lambda: self._kill_up(
                kind, "SIGKILL to `looplift up` (the gateway) as the trainer starts promoting")))

    def _kill_trainer(self, kind: str, stage: str) -> None:
        time.sleep(self.rng.uniform(0.0, 0.3 if stage != "training" else 2.0))
        tr = self.trainer
        if tr is None or not tr.alive():
            self.fault(kind, False, f"the trainer had already exited at stage {stage!r}")
            return
        self.note_sessions()
        self.kill_times[str(tr.pid)] = true_time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tr.pid, signal.SIGKILL)  # the process group: torchrun workers too
        tr.proc.wait()
        self.fault(kind, True, f"SIGKILL to `trainer schedule` (pid {tr.pid}) at stage {stage!r}",
                   restart="operator runs `trainer schedule` again")

    def canary_kill(self) -> bool:
        """With a canary running: kill the gateway, restart, and record what became of the canary."""
        try:
            before = self.stack.admin("GET", "/admin/canary")
        except (httpx.HTTPError, OSError, ValueError):
            return False
        if not before.get("canary"):
            return False
        version = before["canary"]["version"]
        row = self._kill_up("gateway_kill_canary", f"SIGKILL to `looplift up` during a canary of {version}")
        after = self.stack.admin("GET", "/admin/canary")
        history = self.stack.admin("GET", "/admin/versions").get("history", [])
        self.canary_kills.append({"t": row["t"], "version": version, "before": before, "after": after,
                                  "history_after": [h for h in history if h.get("action") == "canary"]})
        return True

    # -- a cycle
    def cycle(self, i: int, kinds: list[str], plain: Path, canary: Path, deadline: float) -> dict[str, Any]:
        use_canary = self.rng.random() < self.args.canary_share
        if "gateway_kill_canary" in kinds or "gateway_kill_promote" in kinds:  # the fault's moment must come
            use_canary = "gateway_kill_canary" in kinds
        config = canary if use_canary else plain
        say(f"cycle {i + 1}: retrain with {'a canary' if use_canary else 'direct promotion'}; faults {kinds or 'none'}")
        timed = [k for k in kinds if k in TIMED]
        for k in kinds:
            if k not in TIMED and k != "gateway_kill_canary":
                self.arm_stage(k, use_canary)
        want_canary_kill = "gateway_kill_canary" in kinds
        at = sorted((self.rng.uniform(3, self.args.fault_window_s), k) for k in timed)
        if self.args.reset_to_base:
            self.reset_to_base()
        start = time.monotonic()
        runs_before = len(self._runs())
        tr = self.start_trainer(config)
        restarts = 0
        while time.monotonic() < deadline:
            self.ensure_watch(config)
            self.note_sessions()
            if at and time.monotonic() - start >= at[0][0]:
                self.inject_timed(at.pop(0)[1])
                continue
            if want_canary_kill and self.canary_kill():
                want_canary_kill = False
            if not tr.alive():
                # When the lock was released (at the latest): a run whose result never got written ends here.
                self.kill_times.setdefault(str(tr.pid), true_time())
                recorded = [r for r in self._runs()[runs_before:] if r.get("status") not in ("interrupted", "running")]
                if recorded or tr.proc.returncode == 0 and not at:
                    break
                restarts += 1
                self.operator.append(f"t={self.t():.0f}: trainer exited ({tr.proc.returncode}) without a recorded "
                                     "result; operator runs `trainer schedule` again")
                tr = self.start_trainer(config)
            time.sleep(0.5)
        else:
            say(f"cycle {i + 1}: out of time")
        for _, k in at:  # timed faults the cycle ended before
            self.inject_timed(k)
        if tr.alive():
            tr.stop(60)
        self.kill_times.setdefault(str(tr.pid), true_time())
        with self._lock:
            left = [h[0] for h in self._stage_hooks]
            self._stage_hooks = []
        for k in kinds:
            if k not in TIMED and not any(f["kind"] == k and f["injected"] for f in self.faults[-20:]):
                if k == "gateway_kill_canary" and not want_canary_kill:
                    continue
                moment = "a running canary" if k == "gateway_kill_canary" else f"trainer stage {left}"
                self.fault(k, False, f"its moment ({moment}) never came in this cycle (the trainer got as far as "
                                     f"{self.stage!r})")
        if self._canary_running():
            # The watch decides from live outcomes; captured traffic has only ratings, so it may never decide.
            decided = wait_for(lambda: not self._canary_running(), self.args.canary_s, 1.0)
            if not decided:
                self.stack.admin("DELETE", "/admin/canary")
                self.operator.append(f"t={self.t():.0f}: the watch had not decided the canary in {self.args.canary_s:.0f}"
                                     " s; operator ended it (DELETE /admin/canary)")
        runs = self._runs()[runs_before:]
        return {"cycle": i + 1, "canary": use_canary, "seconds": round(time.monotonic() - start, 1),
                "trainer_restarts": restarts, "runs": [{k: r.get(k) for k in ("run_id", "status", "reason", "candidate",
                                                                             "candidate_success", "serving_success")}
                                                       for r in runs]}

    def reset_to_base(self) -> None:
        """Serve the base again (an operator's promote of it), so this cycle's gate has something to beat: after
        one promotion the tiny model has nothing left to learn on this task, and a soak whose gates all reject
        never reaches a canary or a promote to fault. For the same reason the app's alpha-spending ledger is
        deleted (the documented way to restart its count, trainer/_gate.py): by the fifth gate alpha_k is 1/25
        of the first, and a +10-point candidate on the soak's 25 selection tasks no longer passes."""
        ledgers = list((self.home.path / "trainer" / "runs" / "gate-ledger").glob("*.json"))
        for ledger in ledgers:
            ledger.unlink(missing_ok=True)
        if ledgers:
            self.operator.append(f"t={self.t():.0f}: operator deleted the gate ledger (the app's alpha restarts)")
        try:
            view = self.stack.admin("GET", "/admin/versions")
            base = view["versions"][0]["name"]
            if view.get("serving") != base and not self._canary_running():
                self.stack.admin("POST", "/admin/promote", json={"version": base})
                self.operator.append(f"t={self.t():.0f}: operator served the base {base} again (was "
                                     f"{view.get('serving')}) so the next gate has something to beat")
        except (httpx.HTTPError, OSError, ValueError, KeyError, IndexError) as e:
            self.operator.append(f"t={self.t():.0f}: could not serve the base again ({type(e).__name__}: {e})")

    def _left_loaded(self) -> list[str]:
        """Versions still loaded at the end that neither serve nor run a canary (an observation, not an invariant:
        nothing in the product unloads a rejected candidate)."""
        try:
            view = self.stack.admin("GET", "/admin/versions")
            canary = (self.stack.admin("GET", "/admin/canary").get("canary") or {}).get("version")
        except (httpx.HTTPError, OSError, ValueError):
            return ["(the gateway did not answer /admin/versions)"]
        return [v["name"] for v in view.get("versions", []) if v.get("state") == "loaded"
                and v["name"] not in (view.get("serving"), canary, "policy-v0")]

    def _canary_running(self) -> bool:
        try:
            return bool(self.stack.admin("GET", "/admin/canary").get("canary"))
        except (httpx.HTTPError, OSError, ValueError):
            return False

    def _runs(self) -> list[dict[str, Any]]:
        from trainer import list_runs

        return list_runs(self.home.path / "trainer" / "runs")

    # -- the whole run
    def run(self) -> dict[str, Any]:
        a = self.args
        say(f"home {self.home.path} ({'tmpfs' if self.home.mounted else 'plain dir: ' + self.home.why_no_tmpfs})")
        how = self.home.seed_models(a.base_model, a.name_model)
        say(f"base model {how}")
        plain, canary = self.write_configs()
        self.stack.start()
        say(f"stack up: gateway {self.stack.gateway}, collector {self.stack.collector}")
        deadline = time.monotonic() + a.minutes * 60  # from a serving stack: the first start is not the product's run
        self.note_sessions()
        app = App(self.stack.gateway, self.ledger, a.seed, a.threads, a.retry_s, a.think_s)
        app.start()
        try:
            for i, kinds in enumerate(self.plan()):
                if time.monotonic() >= deadline:
                    for k in kinds:
                        self.fault(k, False, "the soak's time ran out before this cycle")
                    continue
                c = self.cycle(i, kinds, plain, canary, deadline)
                self.cycles.append(c)
                served = sum(1 for r in self.ledger.rows if r["kind"] == "chat" and r["final"])
                say(f"cycle {i + 1} done in {c['seconds']} s: runs {[r['status'] for r in c['runs']]}; "
                    f"{served} chat requests so far")
        finally:
            say("stopping the app")
            app.stop()
            self._settle()
            if self.watch is not None:
                self.watch.stop(30)
            if self.trainer is not None and self.trainer.alive():
                self.trainer.stop(60)
            self.note_sessions()
            self.left_loaded = self._left_loaded()
            self.restore_clock()  # before the checker reads anything: it maps stamps through every step
            rc = self.stack.stop()
            self.operator.append(f"t={self.t():.0f}: `looplift up` stopped with SIGTERM, exit {rc}")
        return self.finish()

    def _settle(self) -> None:
        """Wait until the collector's count stops changing (capture is asynchronous, the spool replays)."""
        last, stable = -1, 0
        for _ in range(60):
            try:
                key = (self.home.path / "collector.key").read_text().strip()
                n = httpx.get(f"{self.stack.collector}/v1/stats", headers={"Authorization": f"Bearer {key}"},
                              timeout=10).json()["total"]
            except (httpx.HTTPError, OSError, ValueError, KeyError):
                n = -2
            stable = stable + 1 if n == last else 0
            if stable >= 3:
                return
            last = n
            time.sleep(1)

    def finish(self) -> dict[str, Any]:
        facts = inv.SoakFacts(
            home=str(self.home.path), db_url=self.db_url, ledger=self.ledger.rows, faults=self.faults,
            canary_kills=self.canary_kills,
            ports=[self.stack.gw_port, self.stack.col_port, *sorted(self.stack.vllm_ports)],
            owned_pids=sorted(self.pids), sessions=sorted(self.sessions), marker=self.home.marker,
            mounts=[str(self.home.path)] if self.home.mounted else [], temp_paths=[str(self.home.root)],
            kill_times=self.kill_times, up_kills=self.up_kills, clock_steps=self.clock_steps,
            up_starts=[(a - self.ledger.t0, b - self.ledger.t0) for a, b in self.stack.windows],
            disk_bound_bytes=self.args.disk_bound_mb << 20)
        scratch = Path(tempfile.mkdtemp(prefix="looplift-soak-check-"))
        facts.temp_paths.append(str(scratch))
        say("checking the invariants")
        with _env("LOOPLIFT_HOME", str(self.home.path)):
            results = inv.check_stopped_state(facts, scratch)
        stats = self._traffic(facts)
        shutil.rmtree(scratch, ignore_errors=True)
        if self.args.keep_home:
            with (self.logs / "ledger.jsonl").open("w") as f:
                f.writelines(json.dumps(r) + "\n" for r in self.ledger.rows)
            shutil.copytree(self.home.path, self.home.root / "home-kept", symlinks=True)
            facts.temp_paths.remove(str(self.home.root))
            self.home.remove(keep_root=True)
            say(f"kept {self.home.root} (the home copied to home-kept/, logs in logs/)")
        else:
            self.home.remove()
        wait_for(lambda: inv.check_nothing_left(facts).passed, 60, 1.0)
        results.append(inv.check_nothing_left(facts))
        injected: dict[str, int] = {k: 0 for k in KINDS}
        not_injected: dict[str, list[str]] = {}
        for row in self.faults:
            if row["injected"]:
                injected[row["kind"]] += 1
            else:
                not_injected.setdefault(row["kind"], []).append(row["note"])
        return {"args": vars(self.args), "seconds": round(self.t(), 1), "cycles": self.cycles, **stats,
                "left_loaded": self.left_loaded,
                "faults_injected": injected, "faults_not_injected": not_injected, "faults": self.faults,
                "canary_kills": self.canary_kills, "operator": self.operator,
                "invariants": inv.as_json(results), "passed": all(r.passed for r in results)}

    def _traffic(self, facts: inv.SoakFacts) -> dict[str, Any]:
        finals = [r for r in self.ledger.rows if r["final"]]
        chats = [r for r in finals if r["kind"] == "chat"]
        ok = [r for r in chats if inv._ok_2xx(r)]  # noqa: SLF001
        failed = [r for r in chats if not inv._ok_2xx(r)]  # noqa: SLF001
        fbs = [r for r in finals if r["kind"] == "feedback"]
        why: dict[str, int] = {}
        for r in failed:
            key = f"{r['status']}: {(r['error'] or '')[:80]}"
            why[key] = why.get(key, 0) + 1
        try:
            from collector import open_store

            with _env("LOOPLIFT_HOME", facts.home):
                store = open_store(facts.db_url, migrate_schema=False)
                stored = store.count()
                store.close()
        except Exception as e:  # noqa: BLE001 - the invariants already say why the store cannot be read
            stored = f"unreadable: {e}"
        return {"requests": len(chats), "served": len(ok), "failed": len(failed), "failed_why": why,
                "attempts": sum(1 for r in self.ledger.rows if r["kind"] == "chat"),
                "retried": sum(1 for r in chats if r["attempt"] > 1),
                "versions": {v: sum(1 for r in ok if r["version"] == v) for v in sorted({str(r["version"]) for r in ok})},
                "app_errors": [r["error"] for r in finals if r["kind"] == "app_error"][:10],
                "feedback_sent": len(fbs), "feedback_accepted": sum(1 for r in fbs if inv._ok_2xx(r)),  # noqa: SLF001
                "trajectories_stored": stored,
                "failed_at_kill": [{k: r[k] for k in ("t", "session", "status", "error")} for r in failed][:20],
                "feedback_failed": [{k: r[k] for k in ("t", "session", "response_id", "status", "error")}
                                    for r in fbs if not inv._ok_2xx(r)][:20]}  # noqa: SLF001


def report(result: dict[str, Any]) -> str:
    lines = [f"soak: {len(result['cycles'])} cycles in {result['seconds']:.0f} s; requests {result['requests']} "
             f"(served {result['served']}, failed {result['failed']}, retried {result['retried']}); feedback "
             f"{result['feedback_accepted']}/{result['feedback_sent']} accepted; trajectories stored "
             f"{result['trajectories_stored']}", f"served by version: {result['versions']}"]
    if result["failed_why"]:
        lines.append(f"failed (after retries): {result['failed_why']}")
    lines.append("cycles:")
    for c in result["cycles"]:
        lines.append(f"  {c['cycle']}: {'canary' if c['canary'] else 'promote'} {c['seconds']:.0f} s, trainer restarts "
                     f"{c['trainer_restarts']}, runs " + ", ".join(f"{r['status']}({r['candidate']})" for r in c["runs"]))
    lines.append(f"{'fault':<24} injected  not injected (why)")
    for k in KINDS:
        why = "; ".join(sorted(set(result["faults_not_injected"].get(k, []))))[:110]
        lines.append(f"{k:<24} {result['faults_injected'][k]:>8}  {why}")
    lines.append(f"{'invariant':<28} {'result':<6} evidence")
    for r in result["invariants"]:
        lines.append(f"{r['name']:<28} {'PASS' if r['passed'] else 'FAIL':<6} {r['evidence']}")
        lines += [f"{'':<36}- {d}" for d in r["details"]]
    if result["left_loaded"]:
        lines.append(f"observation: versions still loaded at the end, neither serving nor canary: {result['left_loaded']}")
    lines.append("operator log:")
    lines += [f"  {o}" for o in result["operator"]]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Bounded in cycles and in minutes (whichever comes first); loopback only. "
                                       "Exit 0 when every invariant passed, 1 otherwise.")
    p.add_argument("--cycles", type=int, default=3, help="retrain cycles (each one job via the new-data trigger)")
    p.add_argument("--minutes", type=float, default=20.0,
                   help="stop driving this long after the stack first served (then stop it and check)")
    p.add_argument("--seed", type=int, default=0, help="seeds the app, the fault plan and the fault moments")
    p.add_argument("--faults", type=int, default=6, help="faults in all, kinds round-robin from a seeded order")
    p.add_argument("--postgres-url", help="run the collector on this Postgres (a fresh database); adds the "
                                          "postgres_restart fault")
    p.add_argument("--json-out", type=Path, help="write the report's JSON here (e.g. bench/results/soak.json)")
    p.add_argument("--kinds", type=lambda v: [k.strip() for k in v.split(",") if k.strip()],
                   help=f"comma-separated fault kinds to inject, in this order (default: all, seeded order): "
                        f"{', '.join(KINDS)}")
    p.add_argument("--step-clock", action="store_true",
                   help="let clock_jump step this machine's wall clock a day (root; stepped back at the end)")
    p.add_argument("--threads", type=int, default=2, help="app threads")
    p.add_argument("--think-s", type=float, default=1.5, help="mean pause of a user between conversations")
    p.add_argument("--new-data", type=int, default=6, help="the retrain trigger: this many new scored trajectories")
    p.add_argument("--suite-tasks", type=int, default=40, help="held-out prompts the gate runs")
    p.add_argument("--sft-steps", type=int, default=30, help="SFT steps per retrain")
    p.add_argument("--sft-batch", type=int, default=8, help="SFT batch size (small: training shares 2 cores with "
                   "the vLLM serving the app)")
    p.add_argument("--sft-lr", type=float, default=0.005, help="SFT learning rate (high: a few steps must change the "
                                                             "model enough for the gate to see a difference)")
    p.add_argument("--gate-alpha", type=float, default=0.5, help="the gate's alpha (high: the soak wants promotions)")
    p.add_argument("--no-reset-to-base", dest="reset_to_base", action="store_false",
                   help="keep the promoted version between cycles (default: each cycle first serves the base again, "
                   "so every gate has something to beat and canaries and promotes happen to be faulted)")
    p.add_argument("--canary-share", type=float, default=0.5, help="share of cycles whose passing gate starts a canary")
    p.add_argument("--canary-s", type=float, default=30.0, help="how long a canary may run before the operator ends it")
    p.add_argument("--retry-s", type=float, default=240.0, help="how long the app retries one request")
    p.add_argument("--fault-window-s", type=float, default=40.0, help="timed faults land this far into a cycle at most")
    p.add_argument("--vllm-back-s", type=float, default=60.0, help="how long to wait for the gateway to restart vLLM")
    p.add_argument("--disk-full-s", type=float, default=8.0, help="how long the disk stays full")
    p.add_argument("--tmpfs-mb", type=int, default=1024, help="size of the home's tmpfs")
    p.add_argument("--disk-bound-mb", type=int, default=512, help="the home must end below this size")
    p.add_argument("--name-model", type=Path, help="the anonymizer's trained name model directory to copy into the "
                                                  "home (default: one a test session trained, else trained at start)")
    p.add_argument("--base-model", type=Path, help="the embedded default base model to copy into the home's cache "
                                                     "(default: one a test session built, else `trainer build-base`)")
    p.add_argument("--keep-home", action="store_true", help="keep the home (logs, db) for a post-mortem")
    args = p.parse_args(argv)
    if args.cycles < 1 or args.minutes <= 0 or args.faults < 0:
        p.error("--cycles must be >= 1, --minutes > 0 and --faults >= 0")
    if args.kinds and set(args.kinds) - set(KINDS):
        p.error(f"unknown fault kinds {sorted(set(args.kinds) - set(KINDS))}; known: {', '.join(KINDS)}")
    soak = Soak(args)
    try:
        result = soak.run()
    except BaseException:
        soak.restore_clock()
        soak.stack.stop()
        soak.home.remove(keep_root=args.keep_home)  # never leave the tmpfs mounted
        raise
    print(report(result), flush=True)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
