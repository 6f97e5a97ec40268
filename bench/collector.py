"""Collector benchmark: HTTP ingest and export throughput against a raw-insert baseline.

    .venv/bin/python bench/collector.py [--n 5000] [--batch 50] [--clients 2] [--workers 2] [--rss-sizes 20000,100000]
                                        [--baseline-src DIR]

One run, on this machine, everything generated in the same run from a seeded Faker:

1. `n` trajectories of ~4 KB each (system/user/assistant tool call/tool result/assistant), each
   carrying an email, a phone number, an IPv4 address and a card number in the user turn, the
   tool-call arguments and the tool output, plus a `user_id` in metadata; pre-serialized into
   batches of `batch` (what the SDK's client sends).
2. Raw-insert baseline: plain `sqlite3.executemany` of the same JSON rows (not anonymized, not
   scored) into a table of the same shape, one transaction per batch, WAL mode: what the disk and
   SQLite cost without the collector.
3. Ingest: the real collector (`collector serve`, uvicorn) in a subprocess on 127.0.0.1 with an API
   key, `clients` threads posting the batches over HTTP; every trajectory is validated,
   anonymized, scored, hashed and stored in one transaction per batch before the 200. Timed from
   the first request to the last response; the row count is checked afterwards. Reported twice:
   wall-clock trajectories/s, and trajectories per CPU-second of the server process (its own CPU
   time from /proc, which other work on a shared machine barely moves). Then the same with
   `collector serve --workers N`. With `--baseline-src DIR` (another checkout, e.g.
   `git archive main | tar -x -C DIR`), the same batches are also posted to that tree's collector,
   interleaved run by run with this tree's, and the table gives this tree's ratio to it.
4. Export: `collector._export.export(..., format="sft")` of the ingested table, against a raw
   baseline (`SELECT data` and write each row as a line). Throughput here excludes ingest.
5. Memory: the export again, in a fresh subprocess per table size (the ingested rows copied with
   new ids up to each size), reporting the process's peak RSS: flat memory means the same peak
   at 20k and 100k rows.
6. Per-user deletion: `Store.purge(where={"user_id": ...})` on the largest table (a scan of every
   row's JSON, no index), timed.
7. Where ingest time goes, without a profiler (which inflates the anonymizer's many small calls):
   a fresh process per run does the server's per-batch work on the same batches after the same
   warm-up batch, timing CPU per stage: parse + validate, the anonymizer (`Anonymizer.trajectory`,
   timed through a wrapper), hash + score + serialize, and the rest of `Store.add_trajectories`
   (SQL insert and commit). HTTP (uvicorn, FastAPI, the thread hop) is the server's CPU per
   trajectory minus that total. The anonymizer alone is also reported as a throughput row.

Targets (issue 4): ingest >= 1,000 trajectories/s, export >= 5,000 trajectories/s. Needs the
`collector` and `bench` extras (Faker). Writes bench/results/collector.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# First, always: run as a script, this file's directory comes first on sys.path, and this file is
# itself named collector.py, which would shadow the `collector` package.
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from faker import Faker  # noqa: E402

from sdk._types import Message, Outcome, ToolCall, ToolCallFunction, Trajectory, TrajectoryBatch  # noqa: E402

TARGET_INGEST = 1000.0
TARGET_EXPORT = 5000.0
KEY = "bench-key"


# ---------------------------------------------------------------------------------------------
# Data


def make_trajectories(n: int, seed: int, size: int = 4096, prefix: str = "b") -> list[Trajectory]:
    """`n` support-agent trajectories of about `size` bytes of JSON, PII in four places each."""
    Faker.seed(seed)
    rng = random.Random(seed)
    f = Faker("en_US")
    out = []
    for i in range(n):
        email, phone, ip = f.email(), f.phone_number(), f.ipv4()
        user = f"Hi, I'm {f.name()} ({email}, {phone}). " + f.paragraph(nb_sentences=6)
        args = json.dumps({"query": f"orders for {email}", "limit": rng.randrange(1, 50)})
        obs = f"rows: 3; last login from {ip}; card on file {f.credit_card_number()}; " + f.paragraph(nb_sentences=4)
        msgs = [
            Message(role="system", content="You are a helpful support agent. " + f.sentence()),
            Message(role="user", content=user),
            Message(role="assistant", tool_calls=[
                ToolCall(id=f"call_{i}", function=ToolCallFunction(name="search_orders", arguments=args))]),
            Message(role="tool", tool_call_id=f"call_{i}", content=obs),
            Message(role="assistant", content=f.paragraph(nb_sentences=6)),
        ]
        t = Trajectory(
            id=f"{prefix}-{seed}-{i:07d}", app="support", task_id=f"task-{i % 97}", model="policy",
            served_version="policy-v1", messages=msgs,
            outcome=Outcome(success=rng.random() < 0.6, reward=round(rng.random(), 3)),
            metadata={"user_id": f"u-{rng.randrange(10**6)}"},
        )
        short = size - len(t.model_dump_json())
        if short > 0:  # pad the final answer with prose up to the target size
            words: list[str] = []
            while sum(len(w) + 1 for w in words) < short:
                words.append(f.word())
            msgs[-1].content = f"{msgs[-1].content} {' '.join(words)}"[: len(msgs[-1].content or "") + short]
        out.append(t)
    return out


def batches(trajs: list[Trajectory], size: int) -> list[bytes]:
    return [TrajectoryBatch(trajectories=trajs[i : i + size]).model_dump_json().encode() for i in range(0, len(trajs), size)]


# ---------------------------------------------------------------------------------------------
# Baselines


_RAW_DDL = """CREATE TABLE raw (id TEXT PRIMARY KEY, app TEXT, task_id TEXT, model TEXT, served_version TEXT,
    success INTEGER, reward REAL, score REAL, n_messages INTEGER, content_hash TEXT, created_at TEXT,
    started_at TEXT, finished_at TEXT, data TEXT)"""


def raw_insert(path: Path, trajs: list[Trajectory], batch: int) -> tuple[float, float]:
    """Wall and CPU seconds to executemany the same JSON rows, one transaction per batch (rows
    serialized beforehand)."""
    rows = [
        (t.id, t.app, t.task_id, t.model, t.served_version, None, None, None, len(t.messages), "", "", "", "", t.model_dump_json())
        for t in trajs
    ]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(_RAW_DDL)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(rows), batch):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO raw VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows[i : i + batch])
        conn.execute("COMMIT")
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    conn.close()
    return dt, cpu


def raw_export(db_path: Path, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds to read every stored row's JSON and write it as a line (no parsing,
    no reshaping)."""
    conn = sqlite3.connect(db_path)
    t0, c0 = time.perf_counter(), time.process_time()
    with out.open("w", encoding="utf-8") as fh:
        for (data,) in conn.execute("SELECT data FROM trajectories ORDER BY created_at, id"):
            fh.write(data)
            fh.write("\n")
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    conn.close()
    return dt, cpu


# ---------------------------------------------------------------------------------------------
# The real collector over HTTP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(db_url: str, log: Path, workers: int = 1, src: Path = ROOT) -> tuple[subprocess.Popen[bytes], str]:
    """`collector serve --workers N` of the source tree `src` on a free port."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(src), "LOOPLIFT_COLLECTOR_KEYS": KEY, "LOOPLIFT_COLLECTOR_DB": db_url}
    cmd = [sys.executable, "-m", "collector.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", db_url,
           "--workers", str(workers)]
    with log.open("ab") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=src)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"collector exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"collector did not answer within 60 s; see {log}")


def post_all(url: str, bodies: list[bytes], clients: int) -> float:
    """Seconds to POST every body, `clients` connections in parallel; raises on any non-200."""
    work = list(enumerate(bodies))
    lock = threading.Lock()
    errors: list[str] = []

    def worker() -> None:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
            while True:
                with lock:
                    if not work or errors:
                        return
                    _i, body = work.pop(0)
                r = c.post("/v1/trajectories", content=body)
                if r.status_code != 200:
                    with lock:
                        errors.append(f"{r.status_code}: {r.text[:300]}")

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"ingest failed: {errors[0]}")
    return dt


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` and its children so far (Linux /proc), or None."""
    total = 0.0
    try:
        pids = [pid] + [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        for p in pids:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return total


def http_ingest(tmp: Path, name: str, bodies: list[bytes], warmup: bytes, clients: int,
                workers: int = 1, src: Path = ROOT) -> tuple[float, float | None, str]:
    """Wall seconds and server CPU seconds to ingest `bodies` (with the collector of `src`), and the database URL."""
    db_url = f"sqlite:///{tmp / name}"
    proc, url = start_server(db_url, tmp / f"{name}.log", workers, src)
    try:
        post_all(url, [warmup], 1)  # first request pays imports, JIT-ish caches, connection setup
        cpu0 = cpu_seconds(proc.pid)
        dt = post_all(url, bodies, clients)
        cpu1 = cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    return dt, (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None, db_url


# ---------------------------------------------------------------------------------------------
# Export: throughput and peak RSS in a fresh process


def grow_table(db_path: Path, rows: int) -> None:
    """Copy the ingested rows under new ids (and the id inside `data`) until the table holds `rows`.

    Each round of copies is dated one day earlier, so the table looks like a real ingest history
    (one ingest time per batch) rather than thousands of rows sharing each timestamp."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    originals = conn.execute("SELECT count(*) FROM trajectories WHERE id NOT LIKE '%-c%'").fetchone()[0]
    have = conn.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    cols = "app, task_id, model, served_version, success, reward, score, n_messages, content_hash"
    times = "started_at, finished_at"
    while have < rows:
        take, tag = min(originals, rows - have), f"-c{have}"  # `have` grows: every tag is new
        days = have // originals  # keeps SQLAlchemy's "YYYY-MM-DD HH:MM:SS.ffffff" text format
        created = f"strftime('%Y-%m-%d %H:%M:%S', created_at, '-{days} days') || substr(created_at, 20)"
        conn.execute("BEGIN")
        conn.execute(
            f"INSERT INTO trajectories (id, {cols}, created_at, {times}, data) SELECT id || '{tag}', {cols}, {created}, "
            f"{times}, replace(data, '\"id\":\"' || id || '\"', '\"id\":\"' || id || '{tag}\"') "
            f"FROM trajectories WHERE id NOT LIKE '%-c%' ORDER BY id LIMIT {take}"
        )
        conn.execute("COMMIT")
        have += take
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def export_in_subprocess(db_url: str, out: Path) -> dict[str, Any]:
    """Run `export` in a fresh interpreter; its peak RSS before and after, and its throughput."""
    code = (
        "import json, resource, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from collector import export, open_store\n"
        "s = open_store(sys.argv[1]); s.close()  # import and migrate-check cost outside the timing\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "t0 = time.perf_counter(); m = export(sys.argv[1], sys.argv[2], format='sft'); dt = time.perf_counter() - t0\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'count': m.count, 'seconds': dt, 'rss_before_mib': before / 1024, 'peak_rss_mib': peak / 1024}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, db_url, str(out)], capture_output=True, text=True, check=True, cwd=ROOT)
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------------------------------------
# Where the server's per-batch CPU time goes (no profiler)


class TimedAnonymizer:
    """The anonymizer the store calls, with the CPU time and number of its calls added up, and the first
    `keep` results kept (keeping them all would grow the heap and bill the garbage collector to later
    stages)."""

    def __init__(self, inner: Any, keep: int = 200) -> None:
        self.inner, self.keep, self.cpu, self.calls, self.out = inner, keep, 0.0, 0, []

    def trajectory_entities(self, t: Trajectory) -> tuple[Trajectory, list[Any]]:
        """What ingest calls (the anonymized trajectory and the entities replaced, for the PII counts)."""
        c0 = time.process_time()
        r, found = self.inner.trajectory_entities(t)
        self.cpu += time.process_time() - c0
        self.calls += 1
        if len(self.out) < self.keep:
            self.out.append(r)
        return r, found

    def trajectory(self, t: Trajectory) -> Trajectory:
        return self.trajectory_entities(t)[0]

    def strings(self, *texts: str | None) -> list[str | None]:
        return list(self.inner.strings(*texts))


def stages_worker(bodies_file: Path, db_path: Path) -> dict[str, float]:
    """In this (fresh) process, as the server does: warm up on the first body, then parse and store
    the others, timing CPU seconds per stage."""
    from collector import CollectorSettings, open_store
    from collector._ingest import content_hash
    from collector._score import score_trajectory

    bodies = [line.encode() for line in bodies_file.read_text().splitlines()]
    timed = TimedAnonymizer(CollectorSettings().make_anonymizer(preload=True))
    store = open_store(f"sqlite:///{db_path}", anonymizer=timed)  # type: ignore[arg-type]
    store.add_trajectories(TrajectoryBatch.model_validate_json(bodies[0]).trajectories)  # the same warm-up as the server's
    timed.cpu, timed.calls, timed.out = 0.0, 0, []
    parse = add = 0.0
    for b in bodies[1:]:
        c0 = time.process_time()
        ts = TrajectoryBatch.model_validate_json(b).trajectories
        c1 = time.process_time()
        store.add_trajectories(ts)
        parse, add = parse + c1 - c0, add + time.process_time() - c1
    store.close()
    c0 = time.process_time()
    for t in timed.out:  # the stages between anonymizer and SQL, again, on a sample of what the anonymizer returned
        content_hash(t)
        score_trajectory(t)
        t.model_dump_json()
    hss = (time.process_time() - c0) / len(timed.out) * timed.calls
    return {"trajectories": float(timed.calls), "parse": parse, "anonymize": timed.cpu, "hash_score_serialize": hss,
            "sql_and_rest": add - timed.cpu - hss}


def ingest_stages(tmp: Path, warmup: bytes, bodies: list[bytes], repeat: int, server_cpu_per_traj: float | None) -> dict[str, Any]:
    """Median CPU ms per 1000 trajectories of each stage over `repeat` fresh processes, and the shares."""
    f = tmp / "stage-bodies.jsonl"
    f.write_text("\n".join(b.decode() for b in [warmup, *bodies]) + "\n")
    runs = []
    for i in range(repeat):
        r = subprocess.run([sys.executable, __file__, "--stages-worker", str(f), str(tmp / f"stages{i}.db")],
                           capture_output=True, text=True, check=True, cwd=ROOT)
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    n = runs[0]["trajectories"]
    keys = ("parse", "anonymize", "hash_score_serialize", "sql_and_rest")
    ms = {k: statistics.median(r[k] for r in runs) / n * 1e6 for k in keys}  # CPU ms per 1000 trajectories
    in_process = sum(ms.values())
    http_raw = server_cpu_per_traj * 1e6 - in_process if server_cpu_per_traj is not None else None
    if http_raw is not None:  # measured apart, at another moment: noise can make it negative
        ms = {"http": max(0.0, http_raw), **ms}
    total = sum(ms.values())
    return {
        "trajectories": int(n), "runs": repeat, "ms_cpu_per_1000": ms, "share": {k: v / total for k, v in ms.items()},
        "http_ms_cpu_per_1000_unclamped": http_raw,
        "outside_anonymizer_share": 1 - ms["anonymize"] / total,
        "anonymizer_alone_per_cpu_s": 1e6 / ms["anonymize"] if ms["anonymize"] else None,
        "ceiling_without_anonymizer_per_cpu_s": 1e6 / (total - ms["anonymize"]) if total > ms["anonymize"] else None,
    }


# ---------------------------------------------------------------------------------------------


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def cpu_summary(n: int, cpu: list[float | None]) -> dict[str, Any]:
    """Per-core capacity: items per CPU-second of the process doing the work (median of runs).
    Unlike wall-clock throughput this barely moves when other processes share the machine."""
    known = [c for c in cpu if c]
    if not known:
        return {"cpu_seconds": None, "per_cpu_s": None}
    return {"cpu_seconds": sorted(known), "per_cpu_s": statistics.median(n / c for c in known)}


def summary(n: int, runs: list[float]) -> dict[str, Any]:
    """Median and best throughput of repeated runs over `n` items."""
    rates = sorted(rate(n, s) for s in runs)
    return {"per_s": statistics.median(rates), "best_per_s": rates[-1], "runs_per_s": rates, "seconds": sorted(runs)}


def print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for h in header:
            table.add_column(h, justify="left" if h == header[0] else "right")
        for row in rows:
            table.add_row(*row)
        Console(width=max(150, Console().width)).print(table)
    except ImportError:
        print(title)
        for row in (header, *rows):
            print("  ".join(row))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000, help="trajectories to ingest")
    ap.add_argument("--batch", type=int, default=50, help="trajectories per POST")
    ap.add_argument("--clients", type=int, default=2, help="concurrent HTTP connections")
    ap.add_argument("--size", type=int, default=4096, help="bytes of JSON per trajectory")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is reported")
    ap.add_argument("--rss-sizes", default="20000,100000", help="table sizes for the export memory check ('' to skip)")
    ap.add_argument("--workers", type=int, default=2,
                    help="also measure ingest with `collector serve --workers N` (default 2, one per core here; 0: skip)")
    ap.add_argument("--stages-n", type=int, default=2000, help="trajectories for the per-stage CPU timing (0: skip)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="another source tree (e.g. `git archive main | tar -x -C DIR`) whose collector is measured "
                    "on the same batches in the same run, for before/after ratios")
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "collector.json")
    ap.add_argument("--stages-worker", nargs=2, type=Path, help=argparse.SUPPRESS)  # internal: one stage-timing run
    args = ap.parse_args(argv)
    if args.stages_worker:
        print(json.dumps(stages_worker(*args.stages_worker)))
        return 0
    base_src = args.baseline_src.resolve() if args.baseline_src else None
    if base_src is not None and not (base_src / "collector" / "_cli.py").is_file():
        ap.error(f"--baseline-src {base_src} holds no collector/_cli.py: give the root of a looplift source tree")
    t_start = time.perf_counter()

    trajs = make_trajectories(args.n, args.seed, args.size)
    mean_bytes = sum(len(t.model_dump_json()) for t in trajs) / len(trajs)
    bodies = batches(trajs, args.batch)
    warmup = batches(make_trajectories(args.batch, args.seed + 1, args.size, prefix="warm"), args.batch)[0]
    results: dict[str, Any] = {}

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="looplift-bench-") as d:
        tmp = Path(d)
        # Each measurement is repeated into a fresh database (and a fresh server for ingest);
        # the median is the headline, since other processes on a small machine add noise. With a
        # baseline tree, its runs alternate with this tree's, so both see the same load.
        raw_runs = [raw_insert(tmp / f"raw{i}.db", trajs, args.batch) for i in range(args.repeat)]
        plan = [("ingest", 1, ROOT)] + ([("ingest_workers", args.workers, ROOT)] if args.workers > 1 else [])
        if base_src is not None:
            plan += [(f"baseline_{k}", w, base_src) for k, w, _ in plan]
        runs: dict[str, list[tuple[float, float | None, str]]] = {k: [] for k, _, _ in plan}
        for i in range(args.repeat):
            for key, workers, src in plan:
                runs[key].append(http_ingest(tmp, f"{key}{i}.db", bodies, warmup, args.clients, workers, src))
        for key, workers, _src in plan:
            results[key] = {"workers": workers, **summary(args.n, [r[0] for r in runs[key]]),
                            **cpu_summary(args.n, [r[1] for r in runs[key]])}
        if base_src is not None:
            results["baseline_src"] = str(base_src)
        db_url = runs["ingest"][0][2]  # the export and memory runs read this one
        db_path = Path(db_url.removeprefix("sqlite:///"))
        with sqlite3.connect(db_path) as conn:
            stored = conn.execute("SELECT count(*) FROM trajectories").fetchone()[0]
            leaked = conn.execute("SELECT count(*) FROM trajectories WHERE data LIKE '%@example.%'").fetchone()[0]
        if stored != args.n + args.batch:
            raise RuntimeError(f"expected {args.n + args.batch} stored trajectories, found {stored}")
        results["ingest"].update(stored=stored, rows_still_holding_an_example_email=leaked)
        results["raw_insert"] = {**summary(args.n, [r[0] for r in raw_runs]), **cpu_summary(args.n, [r[1] for r in raw_runs])}

        from collector import export, open_store

        store = open_store(db_url)  # opening (and the migration check) is timed in the RSS runs below
        exp_runs, exp_cpu, raw_exp_runs = [], [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            m = export(store, tmp / "sft.jsonl", format="sft")
            exp_runs.append(time.perf_counter() - t0)
            exp_cpu.append(time.process_time() - c0)
            raw_exp_runs.append(raw_export(db_path, tmp / "raw.jsonl"))
        store.close()
        results["export"] = {**summary(m.count, exp_runs), **cpu_summary(m.count, exp_cpu), "count": m.count, "bytes": m.bytes}
        results["raw_export"] = {**summary(m.count, [r[0] for r in raw_exp_runs]),
                                 **cpu_summary(m.count, [r[1] for r in raw_exp_runs])}

        rss = []
        for size in [int(x) for x in args.rss_sizes.split(",") if x.strip()]:
            grow_table(db_path, size)
            r = export_in_subprocess(db_url, tmp / f"sft-{size}.jsonl")
            r["table_rows"] = size
            r["per_s"] = rate(r["count"], r["seconds"])
            (tmp / f"sft-{size}.jsonl").unlink()
            rss.append(r)
        results["export_memory"] = rss

        # Per-user deletion scans every row's JSON: its cost on the largest table measured.
        store = open_store(db_url)
        rows_now = store.count()
        user = trajs[0].metadata["user_id"]
        t0 = time.perf_counter()
        purged = store.purge(where={"user_id": user})
        results["purge_where"] = {"table_rows": rows_now, "deleted": purged.trajectories,
                                  "seconds": time.perf_counter() - t0}
        store.close()

        if args.stages_n:
            # After the HTTP runs: their per-CPU-second figure gives the HTTP share.
            per_traj = 1 / results["ingest"]["per_cpu_s"] if results["ingest"].get("per_cpu_s") else None
            results["stages"] = ingest_stages(tmp, warmup, bodies[: max(1, args.stages_n // args.batch)], args.repeat, per_traj)

    ing, raw, exp, rexp = results["ingest"], results["raw_insert"], results["export"], results["raw_export"]
    with_base = "baseline_ingest" in results

    def row(name: str, r: dict[str, Any], base: dict[str, Any] | None, target: float | None,
            before: dict[str, Any] | None = None) -> tuple[str, ...]:
        core = f"{r['per_cpu_s']:,.0f}" if r.get("per_cpu_s") else "-"
        wall = r.get("per_s")
        cells = [name, f"{wall:,.0f}" if wall else "-", f"{r['best_per_s']:,.0f}" if wall else "-", core,
                 (f"{wall / base['per_s']:.3f}x" if base else "1.000x") if wall else "-"]
        if with_base:
            cells.append(f"{wall / before['per_s']:.2f}x / {r['per_cpu_s'] / before['per_cpu_s']:.2f}x"
                         if before and r.get("per_cpu_s") and before.get("per_cpu_s") else "-")
        return (*cells, f"{target:,.0f}" if target else "-", ("yes" if wall >= target else "NO") if target and wall else "-")

    rows = [row("raw insert: sqlite3 executemany", raw, None, None),
            row("ingest: HTTP, anonymize, score, store", ing, raw, TARGET_INGEST, results.get("baseline_ingest"))]
    if "ingest_workers" in results:
        w = results["ingest_workers"]
        rows.append(row(f"  same, collector serve --workers {w['workers']}", w, raw, TARGET_INGEST,
                        results.get("baseline_ingest_workers")))
    if with_base:
        rows.append(row("  before (--baseline-src), 1 process", results["baseline_ingest"], raw, TARGET_INGEST))
        if "baseline_ingest_workers" in results:
            rows.append(row(f"  before, --workers {args.workers}", results["baseline_ingest_workers"], raw, TARGET_INGEST))
    st = results.get("stages")
    if st:
        rows.append(row("  anonymizer alone (in-process)", {"per_cpu_s": st["anonymizer_alone_per_cpu_s"]},
                        None, None))
        rows.append(row("  all but the anonymizer (ceiling)", {"per_cpu_s": st["ceiling_without_anonymizer_per_cpu_s"]},
                        None, None))
    rows += [row("raw export: SELECT data, write lines", rexp, None, None),
             row("export sft: collector.export", exp, rexp, TARGET_EXPORT)]
    print_table(
        f"Collector benchmark: {args.n} trajectories of ~{mean_bytes:,.0f} B with PII, batches of {args.batch}, "
        f"{args.clients} client(s), SQLite; median of {args.repeat} (load average {load_before[0]:.1f} on "
        f"{os.cpu_count()} CPUs)",
        ("path", "trajectories/s", "best", "per CPU-s", "vs raw", *(("vs before: wall / CPU",) if with_base else ()),
         "target", "meets"), rows,
    )
    if rss:
        print_table("Export memory (fresh process per size)", ("table rows", "exported/s", "RSS before MiB", "peak RSS MiB"),
                    [(f"{r['table_rows']:,}", f"{r['per_s']:,.0f}", f"{r['rss_before_mib']:.0f}", f"{r['peak_rss_mib']:.0f}") for r in rss])
    pw = results["purge_where"]
    print(f"purge --where user_id=...: {pw['deleted']} of {pw['table_rows']:,} rows deleted in {pw['seconds']:.2f} s "
          f"(a scan of every row's JSON)")
    if st:
        names = {"http": "HTTP: uvicorn, FastAPI, body read, thread hop (server CPU minus the rest)",
                 "parse": "parse + validate (TrajectoryBatch.model_validate_json)",
                 "anonymize": "anonymize (Anonymizer.trajectory)",
                 "hash_score_serialize": "content_hash + score + model_dump_json",
                 "sql_and_rest": "SQL insert + commit, id lookup, rest of add_trajectories"}
        print_table(f"Where ingest CPU time goes ({st['trajectories']} trajectories, median of {st['runs']} fresh processes, "
                    f"no profiler): {st['outside_anonymizer_share']:.0%} outside the anonymizer",
                    ("stage", "ms CPU / 1000 trajectories", "share"),
                    [(names[k], f"{v:,.0f}", f"{st['share'][k]:.1%}") for k, v in st["ms_cpu_per_1000"].items()])
    if ing["rows_still_holding_an_example_email"]:
        print(f"WARNING: {ing['rows_still_holding_an_example_email']} stored rows still hold an @example. address")

    out = {
        "n": args.n, "batch": args.batch, "clients": args.clients, "seed": args.seed, "repeat": args.repeat,
        "mean_trajectory_bytes": mean_bytes,
        "targets": {"ingest_per_s": TARGET_INGEST, "export_per_s": TARGET_EXPORT},
        **results,
        "targets_met": {"ingest": ing["per_s"] >= TARGET_INGEST, "export": exp["per_s"] >= TARGET_EXPORT,
                        **({"ingest_workers": results["ingest_workers"]["per_s"] >= TARGET_INGEST}
                           if "ingest_workers" in results else {})},
        "environment": {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
                        "sqlite": sqlite3.sqlite_version, "load_average_before": load_before,
                        "load_average_after": os.getloadavg()},
        "wall_seconds": time.perf_counter() - t_start,
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
