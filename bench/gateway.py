"""Gateway benchmark: the latency the gateway adds to a request, measured against vLLM directly.

    .venv/bin/python bench/gateway.py [--n 300] [--per-worker 3] [--rounds 16] [--max-tokens 4]
                                      [--profile PATH] [--json-out bench/results/gateway.json]

One run, on this machine:

1. One real vLLM CPU server for the tiny untrained model (`trainer.write_untrained`), started with
   `server.start_vllm` like `looplift up` does, and its slow first generation paid before anything
   is timed (tests/conftest.py does the same).
2. The gateway in front of it, started with `server.start_gateway_in_thread` (the production path:
   `looplift up` and `looplift server start` run it so) inside a child process, so that the benchmark's
   client and the gateway do not share a GIL, and so that the gateway's CPU time can be read from /proc
   (every thread's `schedstat`, nanoseconds) and sampled by py-spy.
3. Beside it, in another child process, a TCP relay to vLLM that parses nothing (bytes in, bytes out, on
   the same event loop): what a proxy hop costs on this machine before any proxy logic, in the same run.
   On a 2-core machine shared with vLLM and other work, the two extra process wake-ups per request that
   any proxy brings can cost more than the proxy's own CPU.
4. The same requests (chat completions, `max_tokens` small, `ignore_eos` so every answer has the same
   length) sent to vLLM directly, through the relay and through the gateway, from one aiohttp client
   (cheap per request, so it disturbs the machine least; its cost is in every column and cancels):
   * concurrency 1: `n` rounds of one request per target, interleaved (each target takes each place in
     turn), so drift in vLLM's speed lands on all of them equally;
   * concurrency 16: rounds of 16 workers x `per-worker` requests, one target per round, the order
     reversed every round (ABC CBA ...); many short rounds, so a burst of other work on the machine
     lands on every target rather than on one.
   Non-stream answers are read whole; streams to their last byte (time to first byte reported too).
5. Added latency = x percentile - direct percentile (requests cannot be paired one to one at c=16, so
   this is a difference of percentiles, not a percentile of differences). CPU per request is what the
   child process used over the whole mode / its requests (a child is idle while the others are asked).
6. `--profile PATH`: afterwards, py-spy (`pip install py-spy`, in the `bench` extra) samples the gateway
   during a gateway-only c=1 non-stream loop; the collapsed stacks go to PATH, and the samples are grouped
   by where they are (HTTP client, framework, server, event loop, gateway code, ...). Only the thread
   holding the GIL is sampled (`--gil`), i.e. Python running or a call made without releasing the GIL:
   uvloop writes to sockets with the GIL held, so a thread descheduled in that write (the woken vLLM
   takes the core) counts there; the CPU per request from /proc is printed alongside.

Target (issue 8): <= 1 ms p50 added at concurrency 1. Writes bench/results/gateway.json. The machine is
shared (2 cores): other work running at the same time shows up as noise in every column; the load average
before and after is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
# First on the path: bench/ (the script's own directory) holds a `sandboxes.py` that would shadow the package.
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from sdk.infra import atomic_write_json  # noqa: E402

TARGET_ADDED_P50_MS = 1.0
PROFILE_RATE = 500
CHAT = [{"role": "user", "content": "What is 2+3?"}]


# ---------------------------------------------------------------------------------------------
# The child processes: the gateway, and a byte relay as the floor any proxy hop pays


def serve_gateway(vllm_url: str, state_dir: str) -> None:
    """Child process: run the gateway (production start-up path) until stdin closes. `vllm_url` may list several
    vLLMs, comma-separated (a gateway over replicas, for bench/replicas.py)."""
    from server import GatewaySettings, start_gateway_in_thread

    settings = GatewaySettings(admin_token="bench-admin", state_dir=Path(state_dir))
    urls = vllm_url.split(",")
    with start_gateway_in_thread(settings, urls if len(urls) > 1 else urls[0], port=0) as gw:
        print(gw.port, flush=True)
        sys.stdin.read()  # the parent closes our stdin to stop us


def serve_relay(vllm_url: str) -> None:
    """Child process: a TCP relay to vLLM that parses nothing (one upstream connection per client connection,
    bytes copied both ways as they come), on the same event loop as the gateway. What it adds is the cost of
    the extra hop itself on this machine: two more sockets, two more process wake-ups per request."""
    up = urlsplit(vllm_url)

    class Back(asyncio.Protocol):
        def __init__(self, front: "Front") -> None:
            self.front = front

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport

        def data_received(self, data: bytes) -> None:
            self.front.t.write(data)

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self.front.t.close()

    class Front(asyncio.Protocol):
        back: Optional[Back] = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport
            self.early: list[bytes] = []  # what the client sent before the upstream connection was up
            asyncio.ensure_future(self._connect())

        async def _connect(self) -> None:
            _, back = await asyncio.get_running_loop().create_connection(lambda: Back(self), up.hostname, up.port)
            back.t.write(b"".join(self.early))
            self.back = back

        def data_received(self, data: bytes) -> None:
            if self.back is None:
                self.early.append(data)
            else:
                self.back.t.write(data)

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self.back is not None:
                self.back.t.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Front, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await loop.run_in_executor(None, sys.stdin.read)
        server.close()

    try:
        import uvloop
        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


class Child:
    """A child process serving HTTP on a port it prints; `cpu_ns()` is the CPU time of all its threads so far.
    It runs `script` (default: this file) with `args`."""

    def __init__(self, *args: str, script: str = __file__) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, script, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the child process {args[0]} did not start (see its output above)")
        self.url = f"http://127.0.0.1:{int(line)}"

    def cpu_ns(self) -> int:
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended between listing and reading
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------------------------
# Requests


@dataclass
class Sample:
    total_s: float
    first_byte_s: float


async def one(session: aiohttp.ClientSession, url: str, model: str, body: dict[str, Any]) -> Sample:
    t0 = time.perf_counter()
    async with session.post(f"{url}/v1/chat/completions", json={**body, "model": model}) as r:
        first: Optional[float] = None
        async for _ in r.content.iter_any():
            if first is None:
                first = time.perf_counter()
        if r.status != 200:
            raise SystemExit(f"{url} answered {r.status}")
    t1 = time.perf_counter()
    return Sample(t1 - t0, (first or t1) - t0)


@dataclass
class Target:
    name: str
    url: str
    model: str


async def run_c1(session: aiohttp.ClientSession, targets: list[Target], body: dict[str, Any],
                 n_rounds: int) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {t.name: [] for t in targets}
    n = len(targets)
    for i in range(n_rounds):
        order = targets[i % n:] + targets[:i % n]  # each target takes each place in turn, both directions
        for t in order if (i // n) % 2 == 0 else order[::-1]:
            out[t.name].append(await one(session, t.url, t.model, body))
    return out


async def run_cn(session: aiohttp.ClientSession, targets: list[Target], body: dict[str, Any], concurrency: int,
                 per_worker: int, rounds: int) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {t.name: [] for t in targets}

    async def worker(t: Target) -> None:
        for _ in range(per_worker):
            out[t.name].append(await one(session, t.url, t.model, body))

    for r in range(rounds):  # ABC CBA ...
        for t in targets if r % 2 == 0 else targets[::-1]:
            await asyncio.gather(*(worker(t) for _ in range(concurrency)))
    return out


# ---------------------------------------------------------------------------------------------
# Results


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


@dataclass
class Row:
    mode: str
    concurrency: int
    n: int
    direct_p50_ms: float
    direct_p99_ms: float
    gateway_p50_ms: float
    gateway_p99_ms: float
    #: gateway - direct
    added_p50_ms: float
    added_p99_ms: float
    #: relay - direct: what a proxy that parses nothing adds here, same run
    relay_added_p50_ms: float
    relay_added_p99_ms: float
    p50_ratio: float
    added_first_byte_p50_ms: Optional[float]
    gateway_cpu_ms_per_request: float
    relay_cpu_ms_per_request: float


def latencies(res: dict[str, list[Sample]]) -> tuple[dict[str, list[float]], dict[str, float], dict[str, float]]:
    """Per target: the totals in ms, their p50 and their p99."""
    ms = {k: [s.total_s * 1000 for s in v] for k, v in res.items()}
    return ms, {k: statistics.median(v) for k, v in ms.items()}, {k: pct(v, 99) for k, v in ms.items()}


def row(mode: str, c: int, res: dict[str, list[Sample]], cpu_ns: dict[str, int]) -> Row:
    ms, p50, p99 = latencies(res)
    fb = None
    if mode == "stream":
        fb = (statistics.median(s.first_byte_s for s in res["gateway"])
              - statistics.median(s.first_byte_s for s in res["direct"])) * 1000
    n = len(ms["gateway"])
    return Row(mode, c, n, p50["direct"], p99["direct"], p50["gateway"], p99["gateway"],
               p50["gateway"] - p50["direct"], p99["gateway"] - p99["direct"],
               p50["relay"] - p50["direct"], p99["relay"] - p99["direct"], p50["gateway"] / p50["direct"], fb,
               cpu_ns["gateway"] / 1e6 / n, cpu_ns["relay"] / 1e6 / len(ms["relay"]))


def render(console: Console, rows: list[Row]) -> None:
    t = Table(title="gateway vs vLLM direct, with a byte relay as the floor of any proxy hop "
              "(ms; +added = x - direct, same run)")
    cols = ("mode", "c", "n", "direct p50", "relay +p50", "gw +p50", "gw/direct p50", "direct p99", "relay +p99",
            "gw +p99", "gw +TTFB p50", "gw CPU/req", "relay CPU/req")
    for col in cols:
        t.add_column(col, justify="left" if col == "mode" else "right")
    for r in rows:
        ok = r.concurrency != 1 or r.added_p50_ms <= TARGET_ADDED_P50_MS
        t.add_row(r.mode, str(r.concurrency), str(r.n), f"{r.direct_p50_ms:.2f}", f"{r.relay_added_p50_ms:+.2f}",
                  f"[{'green' if ok else 'red'}]{r.added_p50_ms:+.2f}[/]", f"{r.p50_ratio:.3f}",
                  f"{r.direct_p99_ms:.2f}", f"{r.relay_added_p99_ms:+.2f}", f"{r.added_p99_ms:+.2f}",
                  "" if r.added_first_byte_p50_ms is None else f"{r.added_first_byte_p50_ms:+.2f}",
                  f"{r.gateway_cpu_ms_per_request:.3f}", f"{r.relay_cpu_ms_per_request:.3f}")
    console.print(t)


# ---------------------------------------------------------------------------------------------
# Profile


def profile(console: Console, gw: Child, body: dict[str, Any], seconds: float, path: Path) -> dict[str, Any]:
    """Sample the gateway with py-spy during a gateway-only c=1 loop; print and return the heaviest frames."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        console.print("[yellow]--profile needs py-spy (pip install py-spy); skipped[/]")
        return {}
    path.parent.mkdir(parents=True, exist_ok=True)
    # --gil: only the thread holding the GIL is sampled, i.e. Python actually running; without it, a thread
    # preempted in a socket write (the woken receiver takes the core on a 2-core machine) looks busy.
    rec = subprocess.Popen([spy, "record", "--pid", str(gw.proc.pid), "--rate", str(PROFILE_RATE), "--format", "raw", "--gil",
                            "--duration", str(int(seconds)), "--output", str(path), "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy attaches

    async def loop() -> int:
        n = 0
        async with aiohttp.ClientSession() as s:
            while rec.poll() is None:
                await one(s, gw.url, "policy", body)
                n += 1
        return n

    c0 = gw.cpu_ns()
    n = asyncio.run(loop())
    cpu_ms = (gw.cpu_ns() - c0) / 1e6 / max(n, 1)
    if rec.returncode != 0 or not path.exists():
        console.print(f"[yellow]py-spy failed: {rec.stderr.read().decode()[-500:] if rec.stderr else ''}[/]")
        return {}
    return summarize_profile(console, path, n, cpu_ms)


# Where a sample's time goes: the innermost frame from one of these places decides (stdlib helpers such
# as contextlib, typing or anyio are looked through to the library that called them).
_CATEGORIES = [
    ("upstream client (httpx/httpcore/h11/aiohttp)", ("httpx/", "httpcore/", "h11/", "aiohttp/", "yarl/", "multidict/")),
    ("framework (FastAPI/Starlette/pydantic)", ("fastapi/", "starlette/", "pydantic/")),
    ("HTTP server (uvicorn/httptools)", ("uvicorn/", "httptools/")),
    ("metrics (prometheus_client)", ("prometheus_client/",)),
    ("JSON", ("json/",)),
    ("gateway code (server/)", ("server/",)),
    ("event loop + socket I/O (asyncio, uvloop)", ("asyncio/", "selectors.py", "uvloop/", "socket.py")),
]


# Frames whose own samples are a send() to a socket: with uvloop the write happens in C with the GIL held, so
# py-spy attributes it to the Python caller, including any time the thread spends descheduled right after
# waking the peer it wrote to (on 2 cores the woken vLLM or client often takes the core at once).
_WRITE_LEAVES = ("StreamWriter._writelines", "RequestResponseCycle.send", "_SelectorSocketTransport.write")
_WRITES = "socket writes (send syscalls, incl. being descheduled after waking the peer)"


def _category(frames: list[str]) -> str:
    if frames[-1].partition(" (")[0] in _WRITE_LEAVES:
        return _WRITES
    for f in reversed(frames):
        where = f.partition(" (")[2]
        for name, marks in _CATEGORIES:
            if any(m in where for m in marks):
                return name
    return "other"


def summarize_profile(console: Console, path: Path, requests: int, cpu_ms_per_request: float,
                      rate: int = PROFILE_RATE) -> dict[str, Any]:
    """Print the gateway's GIL-holding samples by category (as time per request) and the heaviest frames;
    return both. A thread preempted inside a syscall still holds the GIL, so on a busy 2-core machine the
    GIL time per request can exceed the CPU time per request (measured from /proc alongside)."""
    cats: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        n = int(count)
        total += n
        cats[_category(frames)] += n
        self_[_short(frames[-1])] += n
    if not total:
        return {}
    us = 1e6 / rate / max(requests, 1)  # one sample, as microseconds per request
    t = Table(title=f"gateway profile: {total} py-spy samples at {rate}/s with the GIL held, {requests} requests: "
              f"{total * us:.0f} us/request with the GIL; CPU (/proc) {cpu_ms_per_request * 1000:.0f} us/request")
    t.add_column("where", justify="left")
    t.add_column("share", justify="right")
    t.add_column("us/request", justify="right")
    for name, n in cats.most_common():
        t.add_row(name, f"{100 * n / total:.1f}%", f"{n * us:.0f}")
    console.print(t)
    top = self_.most_common(12)
    t2 = Table(title="heaviest frames (self)")
    t2.add_column("share", justify="right")
    t2.add_column("frame")
    for f, n in top:
        t2.add_row(f"{100 * n / total:.1f}%", f)
    console.print(t2)
    return {"samples": total, "rate": rate, "requests": requests, "cpu_ms_per_request": cpu_ms_per_request,
            "gil_us_per_request": total * us, "categories": {k: n / total for k, n in cats.most_common()},
            "self": {f: n / total for f, n in top}}


def _short(frame: str) -> str:
    # py-spy raw frames: "function (path/to/file.py:line)"
    fn, _, where = frame.partition(" (")
    file = where.rstrip(")").split("site-packages/")[-1].split("/python3.11/")[-1].rsplit(":", 1)[0]
    return f"{fn} ({file})"


# ---------------------------------------------------------------------------------------------


def wide_console() -> Console:
    """A rich console, 150 columns wide when not a terminal (logs keep whole table rows)."""
    console = Console()
    if not console.is_terminal:
        console.width = 150
    return console


@contextlib.contextmanager
def tiny_model_home(console: Console, prefix: str) -> Iterator[tuple[Path, Path]]:
    """(a throwaway LOOPLIFT_HOME, the tiny untrained model built in it), removed afterwards."""
    from trainer import write_untrained

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        home = Path(tmp)
        os.environ["LOOPLIFT_HOME"] = str(home)
        with console.status("building the tiny model"):
            model = write_untrained(home / "model", seed=0)
        yield home, model


def load_parser(doc: str) -> argparse.ArgumentParser:
    """The options of the load both gateway benchmarks send: --n, --concurrency, --per-worker, --rounds,
    --max-tokens."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="c=1: requests per target and mode")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--per-worker", type=int, default=3, help="requests per worker per round at c>1")
    ap.add_argument("--rounds", type=int, default=16, help="rounds per target at c>1 (order reversed every round)")
    ap.add_argument("--max-tokens", type=int, default=4)
    return ap


def write_results(console: Console, path: Path, load_before: tuple[float, float, float], elapsed: float,
                  config: dict[str, Any], **parts: Any) -> None:
    """Write a results file: the machine, the config, `parts` (figures), the duration and a timestamp."""
    out = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                       "load_avg_before": load_before, "load_avg_after": os.getloadavg()},
           "config": config, **parts, "seconds": round(elapsed, 1),
           "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    atomic_write_json(path, out)
    console.print(f"wrote {path}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = load_parser(__doc__)
    ap.add_argument("--profile", type=Path, default=None, help="py-spy collapsed stacks of the gateway go here")
    ap.add_argument("--profile-seconds", type=float, default=20.0)
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "gateway.json")
    ap.add_argument("--serve-gateway", nargs=2, metavar=("VLLM_URL", "STATE_DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--serve-relay", metavar="VLLM_URL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_gateway:
        serve_gateway(*args.serve_gateway)
        return 0
    if args.serve_relay:
        serve_relay(args.serve_relay)
        return 0

    from server import VLLMConfig, start_vllm

    console = wide_console()
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    with tiny_model_home(console, "bench-gateway-") as (home, model):
        with console.status("starting vLLM and paying its first generation (one-time warm-up)"):
            vllm = start_vllm(VLLMConfig(model_dir=model, log_path=home / "vllm.log", warm_up=True))
        warmup_s = vllm.warmup_s
        children: dict[str, Child] = {}
        try:
            children["gateway"] = Child("--serve-gateway", vllm.url, str(home / "state"))
            children["relay"] = Child("--serve-relay", vllm.url)
            targets = [Target("direct", vllm.url, "policy-v0"), Target("relay", children["relay"].url, "policy-v0"),
                       Target("gateway", children["gateway"].url, "policy")]
            rows: list[Row] = []
            base = {"messages": CHAT, "max_tokens": args.max_tokens, "ignore_eos": True}

            def cpu() -> dict[str, int]:
                return {k: c.cpu_ns() for k, c in children.items()}

            async def measure() -> None:
                # Idle connections dropped before vLLM's 5 s keep-alive ends them (and the relay's with them).
                conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0)
                async with aiohttp.ClientSession(connector=conn) as s:
                    for body in (base, {**base, "stream": True}):  # warm every path's connections, and vLLM's batches
                        await run_c1(s, targets, body, 10)
                        await run_cn(s, targets, body, args.concurrency, 2, 1)
                    for mode, body in (("non-stream", base), ("stream", {**base, "stream": True})):
                        with console.status(f"{mode}, c=1: {args.n} rounds of {len(targets)}"):
                            c0 = cpu()
                            res = await run_c1(s, targets, body, args.n)
                            rows.append(row(mode, 1, res, {k: v - c0[k] for k, v in cpu().items()}))
                        with console.status(f"{mode}, c={args.concurrency}: {args.rounds} rounds per target"):
                            c0 = cpu()
                            res = await run_cn(s, targets, body, args.concurrency, args.per_worker, args.rounds)
                            rows.append(row(mode, args.concurrency, res, {k: v - c0[k] for k, v in cpu().items()}))

            asyncio.run(measure())
            render(console, rows)
            prof = {}
            if args.profile is not None:
                prof = profile(console, children["gateway"], base, args.profile_seconds, args.profile)
        finally:
            for c in children.values():
                c.stop()
            vllm.stop()
    elapsed = time.perf_counter() - t_start
    c1 = [r for r in rows if r.concurrency == 1 and r.mode == "non-stream"][0]
    verdict = "met" if c1.added_p50_ms <= TARGET_ADDED_P50_MS else "missed"
    console.print(f"target <= {TARGET_ADDED_P50_MS} ms p50 added at c=1 (non-stream): {c1.added_p50_ms:+.2f} ms, {verdict}; "
                  f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; took {elapsed:.0f} s")
    write_results(console, args.json_out, load_before, elapsed,
                  {"n": args.n, "concurrency": args.concurrency, "per_worker": args.per_worker, "rounds": args.rounds,
                   "max_tokens": args.max_tokens},
                  vllm={"startup_s": vllm.startup_s, "warmup_s": warmup_s}, target_added_p50_ms_c1=TARGET_ADDED_P50_MS,
                  results=[asdict(r) for r in rows], profile=prof)
    return 0


if __name__ == "__main__":
    sys.exit(main())
