"""Crash safety of ingest: `kill -9` of a real `collector serve` process while batches are in
flight loses no acknowledged trajectory and leaves no partial one or partial batch.

The server is a subprocess on 127.0.0.1 (a free port), its database SQLite in tmp_path or a
private Postgres schema (see `_dbs.py`). Client threads post batches and record which got a 200.
Each of two rounds SIGKILLs the server at a different moment: right after an acknowledgement
arrives (catches a 200 sent before the commit), then after a random delay while requests are being
processed, or earlier, the instant a watcher polling the database sees any batch in part (which
makes a non-atomic ingest fail every time rather than by luck). The server is restarted on the same database between
rounds, which also exercises SQLite's WAL recovery and the migration-at-open path.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from collector import open_store
from collector._schema import TrajectoryRow
from sdk._types import Message, Outcome, Trajectory, TrajectoryBatch

ROOT = Path(__file__).resolve().parents[1]
BATCH = 40
KEY = "durability-key"


def n_messages(batch: int, j: int) -> int:
    return 2 + (batch * 7 + j) % 6


def make_batch(k: int) -> tuple[list[str], bytes]:
    trajs = []
    for j in range(BATCH):
        n = n_messages(k, j)
        msgs = [
            Message(role="user" if m % 2 == 0 else "assistant",
                    content=f"batch {k} item {j} turn {m}: write to carol.{k}.{j}@example.org, call +1 415 555 01{j % 10}{m % 10}. "
                    + "lorem ipsum dolor sit amet " * 20)
            for m in range(n)
        ]
        trajs.append(Trajectory(id=f"k{k:03d}-{j:02d}", task_id=f"task-{k}", model="policy", messages=msgs,
                                outcome=Outcome(success=True, reward=1.0), metadata={"batch": k}))
    return [t.id for t in trajs], TrajectoryBatch(trajectories=trajs).model_dump_json().encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`collector serve` in a subprocess; `kill9()` is SIGKILL, nothing graceful."""

    def __init__(self, db_url: str, log: Path, workers: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LOOPLIFT_COLLECTOR_KEYS": KEY}
        cmd = [sys.executable, "-m", "collector._cli", "serve", "--host", "127.0.0.1", "--port", str(self.port), "--db", db_url,
               "--workers", str(workers)]
        with log.open("ab") as fh:
            self.proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        try:
            while True:
                assert self.proc.poll() is None, f"collector exited with {self.proc.returncode}:\n{log.read_text()[-3000:]}"
                try:
                    if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"collector did not start:\n{log.read_text()[-3000:]}"
                time.sleep(0.05)
        except BaseException:  # not started: not in `servers` yet, so nothing else would stop it
            self.proc.kill()
            self.proc.wait(30)
            raise

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        assert self.proc.returncode == -signal.SIGKILL


def watch_for_partial_batches(db_url: str, server: Server) -> None:
    """Poll the database from outside while the server runs; the moment any batch is visible in
    part, SIGKILL the server: the worst moment for a non-atomic ingest, and a deterministic one."""
    engine = sa.create_engine(db_url)
    prefix = sa.func.substr(TrajectoryRow.id, 1, 4)
    q = sa.select(prefix, sa.func.count()).group_by(prefix)
    try:
        while server.proc.poll() is None:
            with engine.connect() as conn:
                counts = conn.execute(q).all()
            if any(n != BATCH for _, n in counts):
                server.kill9()
                return
            time.sleep(0.002)
    except sa.exc.OperationalError:  # the database went away with the server (Postgres)
        pass
    finally:
        engine.dispose()


def send_until_killed(server: Server, todo: list[int], bodies: dict[int, bytes], kill_on_ack: int | None,
                      kill_after_s: float | None, db_url: str, clients: int = 3) -> tuple[set[int], int]:
    """Post batches from `todo` with `clients` threads until the server dies; returns the
    acknowledged batch numbers and how many requests failed in flight."""
    acked: set[int] = set()
    failed = [0]
    errors: list[str] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def worker() -> None:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            while True:
                with lock:
                    if not todo:
                        return
                    k = todo.pop(0)
                try:
                    r = c.post("/v1/trajectories", content=bodies[k])
                except httpx.TransportError:
                    with lock:
                        failed[0] += 1
                    return
                with lock:
                    if r.status_code != 200 or r.json()["ids"] != [f"k{k:03d}-{j:02d}" for j in range(BATCH)]:
                        errors.append(f"batch {k}: {r.status_code} {r.text[:300]}")
                        return
                    acked.add(k)
                    if kill_on_ack is not None and len(acked) >= kill_on_ack:
                        server.kill9()  # the instant the 200 arrived: was it committed?

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    if kill_after_s is not None:
        threads.append(threading.Thread(target=watch_for_partial_batches, args=(db_url, server)))
    for t in threads:
        t.start()
    if kill_after_s is not None:
        deadline = time.monotonic() + kill_after_s
        while server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill9()
    for t in threads:
        t.join(60)
    server.proc.wait(30)  # whichever way it died
    assert not errors, errors
    return acked, failed[0]


def check_store(db_url: str, acked: set[int], sent: set[int]) -> int:
    """Every acknowledged trajectory present and whole; every stored row whole; every batch
    all-or-nothing. Returns the number of stored rows."""
    store = open_store(db_url)
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(TrajectoryRow.id, TrajectoryRow.n_messages, TrajectoryRow.data)).all()
    finally:
        store.close()
    per_batch: dict[int, int] = {}
    for rid, n, data in rows:
        t = Trajectory.model_validate_json(data)  # complete JSON that still validates
        k, j = int(rid[1:4]), int(rid[5:7])
        assert t.id == rid and n == len(t.messages) == n_messages(k, j), rid
        assert all("<EMAIL_1>" in (m.content or "") for m in t.messages), rid  # anonymized before storage
        per_batch[k] = per_batch.get(k, 0) + 1
    for k in acked:
        assert per_batch.get(k) == BATCH, f"acknowledged batch {k} has {per_batch.get(k, 0)}/{BATCH} rows"
    for k in sent - acked:
        assert per_batch.get(k, 0) in (0, BATCH), f"unacknowledged batch {k} is partial: {per_batch[k]}/{BATCH}"
    assert set(per_batch) <= sent
    return len(rows)


@pytest.mark.slow
def test_kill_9_during_ingest_loses_no_acknowledged_trajectory(
    any_db_url: str, tmp_path: Path, servers: list[Server]
) -> None:
    db_url = any_db_url
    open_store(db_url).close()  # migrate once up front, so every round's startup is a plain restart
    bodies = {k: make_batch(k)[1] for k in range(40)}
    rng = random.Random(4)
    log = tmp_path / "collector.log"
    acked: set[int] = set()
    sent: set[int] = set()
    in_flight_failures = 0
    rounds = [(3, None), (None, rng.uniform(0.8, 1.5))]  # kill on an ack, then mid-processing
    todo = list(range(40))
    for kill_on_ack, kill_after in rounds:
        server = Server(db_url, log)
        servers.append(server)
        before = set(todo)
        got, failed = send_until_killed(server, todo, bodies, kill_on_ack, kill_after, db_url)
        sent |= before - set(todo)
        acked |= got
        in_flight_failures += failed
    assert acked and in_flight_failures >= 1, "the server was never killed with a request in flight"

    # Restarted on the same database: everything acknowledged is there, and retrying every batch
    # that got no 200 (what the SDK spool does), plus one that did, completes the rest idempotently.
    server = Server(db_url, log)
    servers.append(server)
    try:
        stored = check_store(db_url, acked, sent)
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        accepted = 0
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            for k in sorted(sent - acked) + [min(acked)]:
                r = c.post("/v1/trajectories", content=bodies[k])
                assert r.status_code == 200, r.text
                accepted += r.json()["accepted"]
                assert r.json()["accepted"] in ((0,) if k in acked else (0, BATCH))
        assert stored + accepted == BATCH * len(sent)
        assert check_store(db_url, sent, sent) == BATCH * len(sent)
    finally:
        server.kill9()
    if db_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Every server a test started; any still alive when it ends (a failed assertion) is killed."""
    started: list[Server] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(30)


def _start_worker(url: str, barrier: Any) -> None:
    barrier.wait()
    open_store(url).close()


@pytest.mark.slow
def test_workers_starting_together_on_a_fresh_database_all_come_up(any_db_url: str) -> None:
    # uvicorn --workers N (or N replicas) each migrate at startup. On SQLite a deferred
    # transaction lost that race with "database is locked" (10 of 10 tries before the fix).
    ctx = multiprocessing.get_context("fork")  # children share the imports: no 3 s start each
    for _ in range(3):
        barrier = ctx.Barrier(4)
        procs = [ctx.Process(target=_start_worker, args=(any_db_url, barrier)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    store = open_store(any_db_url)
    store.add_trajectories([Trajectory(id="one", task_id="t", model="m", messages=[Message(role="user", content="hi")])])
    assert store.count() == 1
    store.close()


@pytest.mark.slow
def test_serve_with_two_workers_ingests_into_the_given_db(tmp_path: Path, servers: list[Server]) -> None:
    db_url = f"sqlite:///{tmp_path / 'w.db'}"
    server = Server(db_url, tmp_path / "w.log", workers=2)
    servers.append(server)
    for k in range(4):  # several requests, so both workers are likely to take some
        ids, body = make_batch(k)
        r = httpx.post(f"{server.url}/v1/trajectories", content=body, timeout=60,
                       headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        assert r.status_code == 200 and r.json()["accepted"] == len(ids), r.text
    server.proc.terminate()
    assert server.proc.wait(30) == 0
    store = open_store(db_url)
    assert store.count() == sum(len(make_batch(k)[0]) for k in range(4))
    store.close()
