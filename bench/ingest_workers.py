"""Ingest with several collector workers at once, SQLite against Postgres: trajectories/s, and no id lost or
stored twice when workers are SIGKILLed mid-ingest.

    .venv/bin/python bench/ingest_workers.py [--n 1000] [--workers 1,2] [--kills 3] [--senders 3] [--seed 29]
                                             [--postgres-url URL] [--run-timeout 150] [--json-out FILE]

One run, on this machine, everything on 127.0.0.1:

1. Data: `--n` trajectories of ~4 KB from bench/collector.py's seeded Faker generator (an email, a phone number,
   an IPv4 address and a card number in each), every id unique.
2. Runs: for each backend, each `--workers` count N and kills in (0, `--kills`), a fresh database and a fresh
   `collector serve --workers N --db URL` subprocess on a free port, with a temporary LOOPLIFT_HOME (the name
   model linked in from $LOOPLIFT_HOME or ~/.looplift when it is there, so no run trains it), warmed up with one
   small batch per sender. SQLite: a new file per run. Postgres, when `--postgres-url` or
   $LOOPLIFT_TEST_POSTGRES_URL names a server on this machine: a new schema per run through the URL's
   `search_path` (how tests/_dbs.py isolates the Postgres tests), dropped afterwards.
3. Senders: `--senders` threads, each with its own `sdk.CollectorClient` and spool directory, with the SDK's
   defaults for batch size, flush interval, timeout and retry interval (what an application gets). Each submits
   its share of the trajectories at once, then flushes until its spool is empty. trajectories/s is n over the
   time from the first submit to the last sender done, so the replay of what was spooled is inside it.
4. Kills: at `--kills` seeded moments (fractions of the trajectories acknowledged, drawn from [0.1, 0.8]),
   SIGKILL one worker, a child process of uvicorn's supervisor picked by the seeded rng among those holding a
   sender's connection (keep-alive connections stay with the worker that accepted them, and may all sit on
   one: killing an idle worker would cut nothing). uvicorn (>= 0.30; 0.54 here) replaces a dead worker
   itself: the "restarted" column counts the replacements it started and says whether all N workers served
   again after the run. With N = 1 there is no supervisor (`serve` runs the app in its own process), so the
   whole server is SIGKILLed and started again by this script on the same port and database ("server" in
   the kills column, "by us" in the restarted one). Kills come faster than a worker starts here (10-20 s on
   two busy cores), so a kill can hit the only worker serving while its sibling still starts: the rate with
   kills is mostly the time to restart.
5. Counts, from the database after the spools are empty: lost (ids sent and not stored), duplicated (rows
   beyond one per id, and stored ids nobody sent), broken (a row whose JSON does not validate, names another
   id, disagrees with its `n_messages`, has no content hash, or still holds its trajectory's original email
   address). Also reported: trajectories the senders spooled, trajectories the collector answered as
   duplicates ("replay dups": stored, but the acknowledgement died with its worker or timed out, then replayed), and worker deaths in
   uvicorn's log that none of our kills explains (its health check killing a worker that is still starting).

The ratio column divides each rate by the SQLite 1-worker rate without kills of the same run. One sample per
row: server start-up (5-25 s each) is what bounds the default run to about 5 minutes, and a run without kills
ingests in 2-7 s, so on a shared machine its rate moves with the other load (the load average before and
after is recorded); the counts do not. Exits 1 when anything was lost, duplicated or broken.
Writes bench/results/ingest_workers.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import platform
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # first: bench/collector.py must not shadow the package

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from sdk import ClientStats, CollectorClient, Trajectory  # noqa: E402
from sdk.infra import TiedProcess, atomic_write_json, spawn_tied  # noqa: E402

PG_ENV = "LOOPLIFT_TEST_POSTGRES_URL"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def load_bench_collector() -> ModuleType:
    """bench/collector.py (its trajectory generator, free_port, post_all, print_table), loaded by path: on
    sys.path it would shadow the `collector` package."""
    spec = importlib.util.spec_from_file_location("bench_collector", ROOT / "bench" / "collector.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_collector"] = module
    spec.loader.exec_module(module)
    return module


BC = load_bench_collector()
KEY = BC.KEY  # the API key its post_all sends


# ---------------------------------------------------------------------------------------------
# Databases and the home directory


@contextmanager
def fresh_database(backend: str, tmp: Path, tag: str, pg_base: str | None) -> Iterator[str]:
    """A new, empty collector database URL: a SQLite file in `tmp`, or a Postgres schema of its own (dropped
    on exit) that the URL's connections use through `search_path`."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp / f'{tag}.db'}"
        return
    assert pg_base is not None
    schema = f"bench_iw_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_base)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield sa.make_url(pg_base).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(False)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def check_postgres_url(url: str) -> str:
    """`url` if it names a Postgres server on this machine; SystemExit with the fix otherwise."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as e:
        raise SystemExit(f"--postgres-url {url!r} is not a database URL ({e}); e.g. "
                         "postgresql+psycopg://postgres@127.0.0.1:55432/looplift_test") from e
    if parsed.get_backend_name() != "postgresql":
        raise SystemExit(f"--postgres-url must be a postgresql+psycopg:// URL, not {parsed.drivername}")
    if parsed.host and parsed.host not in LOOPBACK:
        raise SystemExit(f"--postgres-url host {parsed.host!r} is not this machine: the benchmark creates and drops "
                         "schemas, so it only runs against a loopback server (scripts/setup_postgres.sh starts one)")
    return url


def temp_home(tmp: Path) -> tuple[Path, list[str]]:
    """A LOOPLIFT_HOME for the servers, with the name models of the caller's home linked in (read-only use);
    the names of the models linked."""
    home = tmp / "home"
    (home / "models").mkdir(parents=True)
    source = Path(os.environ.get("LOOPLIFT_HOME") or Path.home() / ".looplift").expanduser() / "models"
    linked = []
    for model in sorted(source.glob("anonymizer-names-*")) if source.is_dir() else []:
        (home / "models" / model.name).symlink_to(model.resolve(), target_is_directory=True)
        linked.append(model.name)
    return home, linked


# ---------------------------------------------------------------------------------------------
# The server and its workers


def children(pid: int) -> list[int]:
    """The child processes of `pid` (every thread's children, from /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def established_inodes(port: int) -> set[str]:
    """Socket inodes of the established TCP connections whose local port is `port` (/proc/net/tcp and tcp6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "01":  # 01: ESTABLISHED
                out.add(f[9])
    return out


def holds_socket(pid: int, inodes: set[str]) -> bool:
    """Whether process `pid` has one of these sockets open."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def is_worker(pid: int) -> bool:
    """A uvicorn worker: a `multiprocessing` spawn child (its supervisor's other child is the resource tracker)."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class Server:
    """`collector serve --workers N` in a subprocess on 127.0.0.1, tied to this process (`spawn_tied`: it and its
    workers end when we do, however we end). `kill_one` SIGKILLs one worker (N >= 2) or, with N = 1, the server,
    which it then starts again on the same port and database."""

    def __init__(self, db_url: str, workers: int, home: Path, log: Path) -> None:
        self.db_url, self.workers, self.log = db_url, workers, log
        self.port = BC.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPLIFT_HOME": str(home), "LOOPLIFT_COLLECTOR_KEYS": KEY}
        self.killed: list[int] = []
        self.proc: TiedProcess | None = None
        self.start_seconds = self.start()

    def start(self, timeout: float = 180) -> float:
        """Start the server; seconds until every worker finished startup and /health answered."""
        cmd = [sys.executable, "-m", "collector._cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--db", self.db_url, "--workers", str(self.workers)]
        t0 = time.perf_counter()
        with self.log.open("ab") as fh:
            self.proc = spawn_tied(cmd, grace_s=60, env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        if self.wait_ready(timeout) is None:
            self.stop()
            raise RuntimeError(f"collector did not start {self.workers} worker(s) within {timeout:.0f} s; see {self.log}")
        return time.perf_counter() - t0

    def wait_ready(self, timeout: float) -> float | None:
        """Seconds until the server serves with all its workers started (each has logged "Started server
        process [pid]"), or None after `timeout`."""
        assert self.proc is not None
        t0 = time.monotonic()
        while time.monotonic() < t0 + timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector exited with {self.proc.returncode}; see {self.log}")
            pids = self.worker_pids() if self.workers > 1 else [self.proc.pid]
            if len(pids) == self.workers and set(pids) <= self.started_pids() and self._healthy():
                return time.monotonic() - t0
            time.sleep(0.1)
        return None

    def started_pids(self) -> set[int]:
        return {int(p) for p in re.findall(r"Started server process \[(\d+)\]", self.log.read_text(errors="replace"))}

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        return sorted(p for p in children(self.proc.pid) if is_worker(p))

    def kill_one(self, rng: random.Random) -> dict[str, Any]:
        """SIGKILL one worker, or the whole server (N = 1) and start it again; what was done."""
        assert self.proc is not None
        if self.workers == 1:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            self.killed.append(self.proc.pid)
            return {"target": "server", "pid": self.killed[-1], "restart_seconds": self.start()}
        pids = self.worker_pids()
        # A sender's keep-alive connection stays with the worker that accepted it, and all of them may sit on
        # one: a worker with none is idle, and killing it would cut nothing.
        inodes = established_inodes(self.port)
        serving = [p for p in pids if holds_socket(p, inodes)]
        victim = rng.choice(serving or pids)
        os.kill(victim, signal.SIGKILL)
        self.killed.append(victim)
        return {"target": "worker", "pid": victim, "workers_alive": len(pids), "serving": len(serving)}

    def deaths(self) -> dict[str, int]:
        """From uvicorn's log: workers it started besides the first N, and deaths none of our kills explains."""
        died = {int(p) for p in re.findall(r"Child process \[(\d+)\] died", self.log.read_text(errors="replace"))}
        return {"replacements_started": len(self.started_pids()) - self.workers if self.workers > 1 else 0,
                "stray_deaths": len(died - set(self.killed))}

    def stop(self) -> None:
        """SIGTERM the supervisor, as a service manager would (it stops its workers), then end whatever is left
        of its process group. Not SIGTERM to the whole group: a worker that dies while the supervisor pings it
        (a replacement still starting) is noticed only when the ping times out (`WORKER_HEALTHCHECK_S`)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        self.proc.stop()


# ---------------------------------------------------------------------------------------------
# Senders: the SDK's client, one per thread


class Sent(NamedTuple):
    """What the senders did: wall seconds, their summed counters, whether every spool emptied in time."""

    seconds: float
    stats: ClientStats
    drained: bool


def drain(client: CollectorClient, deadline: float) -> bool:
    """Flush `client` until its queue and spool are empty (True), or `deadline` (monotonic) passes."""
    while time.monotonic() < deadline:
        if client.flush(timeout=min(10.0, max(0.1, deadline - time.monotonic()))) and not client.pending_spool():
            return True
        time.sleep(0.2)  # a collector that is down refuses at once: don't spin
    return False


def send_all(url: str, shares: list[list[Trajectory]], spool_root: Path, timeout: float,
             during: Callable[[Callable[[], ClientStats]], None] | None = None) -> Sent:
    """Each share submitted at once by its own `CollectorClient` in its own thread, then drained. `during`, if
    given, runs in another thread meanwhile with a function that returns the senders' summed counters so far;
    it should return soon after they acknowledged everything."""
    clients = [CollectorClient(url, api_key=KEY, spool_dir=spool_root / f"sender{i}") for i in range(len(shares))]
    barrier = threading.Barrier(len(shares) + 1)
    deadline = time.monotonic() + timeout
    drained: list[bool] = []

    def run(client: CollectorClient, share: list[Trajectory]) -> None:
        barrier.wait()
        for t in share:
            client.submit(t)
        drained.append(drain(client, deadline))

    threads = [threading.Thread(target=run, args=(c, s)) for c, s in zip(clients, shares)]
    for t in threads:
        t.start()
    side = threading.Thread(target=during, args=(lambda: summed(c.stats for c in clients),)) if during else None
    barrier.wait()
    t0 = time.perf_counter()
    if side:
        side.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if side:
        side.join()
    for c in clients:
        c.close()
    return Sent(seconds, summed(c.stats for c in clients), all(drained))


def summed(stats: Iterable[ClientStats]) -> ClientStats:
    total = ClientStats()
    for s in stats:
        for k, v in asdict(s).items():
            setattr(total, k, getattr(total, k) + v)
    return total


def acked(stats: ClientStats) -> int:
    """Trajectories the collector acknowledged: sent from the queue, or replayed from the spool."""
    return stats.sent + stats.replayed


def killer(server: Server, fractions: list[float], n: int, rng: random.Random, events: list[dict[str, Any]],
           deadline: float) -> Callable[[Callable[[], ClientStats]], None]:
    """A `during` for `send_all`: one kill each time the acknowledged count passes a fraction of `n`."""

    def run(progress: Callable[[], ClientStats]) -> None:
        for f in fractions:
            while acked(progress()) < f * n and time.monotonic() < deadline:
                time.sleep(0.01)
            if acked(progress()) >= n or time.monotonic() >= deadline:
                return
            events.append({"at_acked": acked(progress()), **server.kill_one(rng)})

    return run


# ---------------------------------------------------------------------------------------------
# Counting


def verify(db_url: str, trajs: list[Trajectory], warm: set[str]) -> dict[str, int]:
    """Lost, duplicated and broken trajectories (see the module docstring), read from the database."""
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, n_messages, content_hash, data FROM trajectories")).all()
    finally:
        engine.dispose()
    sent = {t.id: t for t in trajs}
    per_id = Counter(r[0] for r in rows)
    broken = sum(1 for r in rows if r[0] in sent and not row_is_whole(r[0], r[1], r[2], r[3], sent[r[0]]))
    return {"stored": len(rows) - sum(per_id[w] for w in warm), "lost": sum(1 for i in sent if i not in per_id),
            "duplicated": sum(c - 1 for c in per_id.values()) + sum(1 for i in per_id if i not in sent and i not in warm),
            "broken": broken}


def row_is_whole(rid: str, n_messages: int, chash: str | None, data: str, original: Trajectory) -> bool:
    """The stored row is complete and anonymized: valid JSON of this id, the right message count, a content
    hash, and none of the original's email addresses."""
    try:
        t = Trajectory.model_validate_json(data)
    except ValueError:
        return False
    emails = {e for m in original.messages for e in EMAIL.findall(m.content or "")}
    return (t.id == rid and n_messages == len(t.messages) == len(original.messages) and bool(chash)
            and bool(emails) and not any(e in data for e in emails))


# ---------------------------------------------------------------------------------------------
# One run


class Run(NamedTuple):
    """One run's row (a NamedTuple, not a dataclass: tests load this file by path, unregistered)."""

    backend: str
    workers: int
    kills: int
    kill_target: str
    per_s: float
    seconds: float
    start_seconds: float
    lost: int
    duplicated: int
    broken: int
    stored: int
    spooled: int
    replayed: int
    server_duplicates: int
    rejected: int
    drained: bool
    replacements_started: int
    stray_deaths: int
    #: seconds after the senders finished until all N workers were started again (None: no kill, or not within 60 s)
    restored_after_s: float | None
    kill_events: list[dict[str, Any]]


def one_run(backend: str, workers: int, kills: int, trajs: list[Trajectory], args: argparse.Namespace,
            tmp: Path, home: Path, pg_base: str | None) -> Run:
    tag = f"{backend}-w{workers}-k{kills}"
    rng = random.Random(f"{args.seed}-{tag}")
    shares = [trajs[i :: args.senders] for i in range(args.senders)]
    warm = BC.make_trajectories(8 * args.senders, args.seed + 1, prefix=f"warm-{tag}")
    with fresh_database(backend, tmp, tag, pg_base) as db_url:
        server = Server(db_url, workers, home, tmp / f"{tag}.log")
        events: list[dict[str, Any]] = []
        try:
            BC.post_all(server.url, BC.batches(warm, 8), args.senders)  # first requests pay caches and connections
            fractions = sorted(rng.uniform(0.1, 0.8) for _ in range(kills))
            during = killer(server, fractions, len(trajs), rng, events, time.monotonic() + args.run_timeout)
            sent = send_all(server.url, shares, tmp / f"{tag}-spool", args.run_timeout, during if kills else None)
            # Not timed: does the server get back to N started workers after the kills?
            restored = server.wait_ready(60) if kills and workers > 1 else None
        finally:
            server.stop()
        counts = verify(db_url, trajs, {t.id for t in warm})
    return Run(backend, workers, kills, ("server" if workers == 1 else "worker") if kills else "-",
               len(trajs) / sent.seconds, sent.seconds, server.start_seconds, counts["lost"], counts["duplicated"],
               counts["broken"], counts["stored"], sent.stats.spooled, sent.stats.replayed, sent.stats.duplicates,
               sent.stats.rejected, sent.drained, **server.deaths(), restored_after_s=restored, kill_events=events)


# ---------------------------------------------------------------------------------------------


def parse_workers(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--workers {text!r}: give worker counts separated by commas, e.g. 1,2") from None
    if not values or any(not 1 <= v <= 8 for v in values):
        raise SystemExit(f"--workers {text!r}: each count from 1 to 8")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="trajectories per run, 50 to 20000 (default 1000)")
    ap.add_argument("--workers", default="1,2", help="`collector serve --workers` counts, 1 to 8 each (default 1,2)")
    ap.add_argument("--kills", type=int, default=3, help="SIGKILLs per run in the kills mode, 0 to 10 (0: no kill runs)")
    ap.add_argument("--senders", type=int, default=3, help="concurrent SDK clients, 1 to 16 (default 3)")
    ap.add_argument("--seed", type=int, default=29, help="seeds the data and the kill moments and victims")
    ap.add_argument("--postgres-url", default=None,
                    help=f"a Postgres server on this machine (default ${PG_ENV}; without either, SQLite only)")
    ap.add_argument("--run-timeout", type=float, default=150,
                    help="seconds each run's senders may take to drain (default 150); what is left counts as lost")
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "ingest_workers.json")
    args = ap.parse_args(argv)
    if not 50 <= args.n <= 20000 or not 0 <= args.kills <= 10 or not 1 <= args.senders <= 16:
        ap.error("--n 50..20000, --kills 0..10, --senders 1..16")
    workers = parse_workers(args.workers)
    pg_url = args.postgres_url or os.environ.get(PG_ENV, "").strip() or None
    pg_base = check_postgres_url(pg_url) if pg_url else None
    backends = ["sqlite"] + (["postgres"] if pg_base else [])
    logging.getLogger("looplift.sdk.collector").setLevel(logging.CRITICAL)  # kills make it warn by design: counted
    t_start, load_before = time.perf_counter(), os.getloadavg()

    trajs = BC.make_trajectories(args.n, args.seed)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="looplift-ingest-workers-") as d:
        tmp = Path(d)
        home, linked = temp_home(tmp)
        for kills in [0] + ([args.kills] if args.kills else []):
            for backend in backends:
                for w in workers:
                    r = one_run(backend, w, kills, trajs, args, tmp, home, pg_base if backend == "postgres" else None)
                    runs.append(r)
                    print(f"  {backend} workers={w} kills={kills}: {r.per_s:,.0f}/s, lost {r.lost}, "
                          f"duplicated {r.duplicated}, broken {r.broken}", file=sys.stderr)
    report(args, trajs, runs, backends, linked, load_before, time.perf_counter() - t_start, pg_base)
    return 1 if any(r.lost or r.duplicated or r.broken or not r.drained for r in runs) else 0


def report(args: argparse.Namespace, trajs: list[Trajectory], runs: list[Run], backends: list[str], linked: list[str],
           load_before: tuple[float, float, float], wall: float, pg_base: str | None) -> None:
    import uvicorn

    base = next((r for r in runs if (r.backend, r.workers, r.kills) == ("sqlite", 1, 0)), None)
    header = ("backend", "workers", "kills done", "traj/s", "vs SQLite 1w", "lost", "duplicated", "broken", "spooled",
              "replay dups", "restarted", "stray deaths", "start s")
    rows = [(r.backend, str(r.workers), f"{len(r.kill_events)} ({r.kill_target})" if r.kills else "0", f"{r.per_s:,.0f}",
             f"{r.per_s / base.per_s:.2f}x" if base else "-", str(r.lost), str(r.duplicated), str(r.broken),
             str(r.spooled), str(r.server_duplicates), restarted(r),
             str(r.stray_deaths), f"{r.start_seconds:.1f}") for r in runs]
    mean_bytes = sum(len(t.model_dump_json()) for t in trajs) / len(trajs)
    BC.print_table(f"Ingest with several workers: {args.n} trajectories of ~{mean_bytes:,.0f} B with PII, {args.senders} "
                   f"SDK senders, {', '.join(backends)}; load average {load_before[0]:.1f} on {os.cpu_count()} CPUs",
                   header, rows)
    if not pg_base:
        print(f"Postgres skipped: give --postgres-url or set {PG_ENV} (scripts/setup_postgres.sh prints one)")
    out = {
        "n": args.n, "senders": args.senders, "kills": args.kills, "seed": args.seed, "workers": parse_workers(args.workers),
        "mean_trajectory_bytes": mean_bytes, "baseline": "sqlite, 1 worker, no kills (same run)",
        "worker_restart": f"uvicorn {uvicorn.__version__} replaces a SIGKILLed worker itself; with 1 worker the "
                          "benchmark kills and restarts the whole server",
        "name_models_linked": linked,
        "runs": [r._asdict() | {"vs_sqlite_1_worker": r.per_s / base.per_s if base else None} for r in runs],
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
                        "sqlite": sqlite3.sqlite_version, "uvicorn": uvicorn.__version__,
                        "postgres": postgres_version(pg_base) if pg_base else None,
                        "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "wall_seconds": wall,
    }
    atomic_write_json(args.json_out, out)
    print(f"wrote {args.json_out}")


def restarted(r: Run) -> str:
    """The restart column: by uvicorn (replacements it started; "back" once all N workers served again), by
    this script (N = 1), or "-" without kills."""
    if not r.kills:
        return "-"
    if r.workers == 1:
        return f"{len(r.kill_events)} (by us)"
    return f"{r.replacements_started} ({'back' if r.restored_after_s is not None else 'NOT back'})"


def postgres_version(url: str) -> str:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SHOW server_version")).scalar_one())
    finally:
        engine.dispose()


if __name__ == "__main__":
    raise SystemExit(main())
