"""A full disk (issue 22), on a real one: a small tmpfs mounted for the test (root only; elsewhere these tests skip
with the reason), filled with a file until writes fail with ENOSPC, then freed.

- the collector answers 507 `insufficient_storage` with a reason, stores nothing of the batch (or the feedback), and
  stores it whole once the space is back;
- the SDK's client spools what got a 507, keeps in memory what its own full spool refuses, and delivers all of it
  once there is room;
- the trainer refuses, before training, a job whose adapter the output's disk cannot hold;
- a retrain job whose disk fills up during the run (its LOOPLIFT_HOME, runs and collector database all on the
  tmpfs) is recorded as failed with "disk full: ..." in the room it set aside at its start, raises its own error,
  and frees the job lock; when not even that record fits, `trainer runs` shows the run as failed ("died"), never
  as running, while the job's process (a scheduler) lives on; a disk too full to start a run leaves none behind.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from fastapi.testclient import TestClient

from _trajs import body, traj

if TYPE_CHECKING:
    from trainer import JobConfig, TrainStep


class SmallDisk:
    """A tmpfs of `size` bytes at `path`; `fill()` takes all of its free space, `free()` gives it back."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        path.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
        self._filler = path / "filler"

    def fill(self) -> None:
        with self._filler.open("ab", buffering=0) as f:  # unbuffered: nothing left to fail at close
            try:
                while f.write(b"\0" * 4096):
                    pass
            except OSError as e:
                assert e.errno == 28, e  # ENOSPC

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    d = SmallDisk(tmp_path / "disk", 8 << 20)
    try:
        yield d
    finally:
        d.unmount()


def _rows(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        return [r[0] for r in c.execute("select id from trajectories order by id")]


def test_collector_answers_507_on_a_full_disk_and_stores_the_batch_whole_later(disk: SmallDisk) -> None:
    """Broken variants: a full disk answered like any database failure (503 `storage_unavailable`, no reason the
    operator can act on), or part of a batch stored (rows counted after the 507)."""
    from collector import CollectorSettings, create_app

    db = disk.path / "collector.db"
    batch = [traj(i, content="My e-mail is jane.doe@example.com " + "x" * 20_000) for i in range(8)]
    with TestClient(create_app(CollectorSettings(db_url=f"sqlite:///{db}"))) as c:
        assert c.post("/v1/trajectories", content=body(traj(100))).status_code == 200
        disk.fill()
        r = c.post("/v1/trajectories", content=body(*batch))
        assert r.status_code == 507, r.text
        err = r.json()["error"]
        assert err["code"] == "insufficient_storage" and "disk is full" in err["message"], err
        fb = c.post("/v1/feedback", json={"trajectory_id": "traj-0100", "rating": 1.0, "text": "y" * 50_000})
        assert fb.status_code in (200, 507), fb.text  # a small write may still fit in the database's free pages
        disk.free()
        r = c.post("/v1/trajectories", content=body(*batch))
        assert r.status_code == 200 and r.json()["accepted"] == 8, r.text
    assert _rows(db) == sorted(t.id for t in [traj(100), *batch])


def test_sdk_spools_a_507_and_keeps_what_a_full_spool_refuses(disk: SmallDisk, tmp_path: Path) -> None:
    """Broken variant: the client's spool write raising on a full disk, so the batch was dropped (the background
    thread logged and went on); here every trajectory reaches the collector once space is back."""
    from collector import CollectorSettings, serve_in_thread
    from sdk import CollectorClient

    db = disk.path / "collector.db"
    spool = disk.path / "spool"  # the application's spool on the same full disk: nothing can be written anywhere
    with serve_in_thread(CollectorSettings(db_url=f"sqlite:///{db}")) as col:
        client = CollectorClient(col.url, spool_dir=spool, retry_interval=0.2, flush_interval=0.1)
        try:
            disk.fill()
            for i in range(6):
                client.submit(traj(i, content="z" * 20_000))
            assert not client.flush(timeout=3)  # neither sent (507) nor spooled (ENOSPC): still held
            assert client.stats.sent == 0 and client.stats.spooled == 0
            assert not list(spool.glob("*.jsonl")) and not list(spool.glob(".*.tmp"))  # nothing half-written
            disk.free()
            assert client.flush(timeout=30)
            assert client.flush(timeout=30)  # the spool (if anything went there meanwhile) replayed
        finally:
            client.close()
        assert client.stats.sent + client.stats.replayed == 6, client.stats
        assert not client.pending_spool()
        with httpx.Client(base_url=col.url) as h:
            assert h.get("/v1/stats").status_code == 200
    assert _rows(db) == [f"traj-{i:04d}" for i in range(6)]


def test_trainer_refuses_a_job_its_disk_cannot_hold(looplift_model_dir: Path, tmp_path: Path) -> None:
    """Broken variant: training first and failing at the save (minutes of work lost, a temp directory left);
    here the refusal comes before any step, names the space needed and free, and writes nothing."""
    from trainer import DiskSpaceError, SFTConfig, train_sft

    data = tmp_path / "sft.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}\n')
    tiny = SmallDisk(tmp_path / "tiny", 64 << 10)  # less than the margin alone
    try:
        with pytest.raises(DiskSpaceError, match=r"needs about [\d.]+ MiB and [\d.]+ MiB are free"):
            train_sft(looplift_model_dir, data, tiny.path / "adapter", SFTConfig(steps=1, batch_size=1))
        assert not any(tiny.path.iterdir())
    finally:
        tiny.unmount()
    out = train_sft(looplift_model_dir, data, tmp_path / "adapter", SFTConfig(steps=1, batch_size=1))
    assert (out.adapter_dir / "adapter_config.json").exists()


def test_a_full_postgres_disk_is_told_apart_from_other_database_failures() -> None:
    """Broken variants: PostgreSQL's disk_full (SQLSTATE 53100) or ENOSPC answered as a plain 503; any other
    failure (a lost connection) answered as a full disk."""
    import errno

    import psycopg.errors
    import sqlalchemy as sa

    from collector._engine import storage_error
    from collector.errors import StorageFullError

    def wrapped(orig: BaseException) -> sa.exc.OperationalError:
        return sa.exc.OperationalError("INSERT ...", {}, orig)

    assert isinstance(storage_error("store", wrapped(psycopg.errors.DiskFull("could not extend file"))),
                      StorageFullError)
    assert isinstance(storage_error("store", OSError(errno.ENOSPC, "No space left on device")), StorageFullError)
    lost = storage_error("store", wrapped(psycopg.errors.AdminShutdown("terminating connection")))
    assert not isinstance(lost, StorageFullError) and str(lost).startswith("store: AdminShutdown")


# ---- a retrain job on a disk that fills up -------------------------------------------------------
def _job_on(disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> JobConfig:
    """A job whose LOOPLIFT_HOME (so its runs), collector database and job lock file are all on `disk`."""
    from _jobsteps import add_trajectories

    from trainer import JobConfig

    monkeypatch.setenv("LOOPLIFT_HOME", str(disk.path))
    db_url = f"sqlite:///{disk.path / 'collector.db'}"
    add_trajectories(db_url, 12)
    return JobConfig(base_model_dir=disk.path / "base", collector_db=db_url, app="shop", min_examples=1)


def _filling_step(disk: SmallDisk, raised: list[OSError], *, room_taken: bool = False) -> TrainStep:
    """The real SFT export, then a "training" that fills the disk and fails writing its adapter with ENOSPC (kept in
    `raised`). `room_taken`: another program first takes the room the run set aside for its result."""
    from trainer import TrainStep
    from trainer._steps import SFT_STEP

    def train(ctx, data):  # type: ignore[no-untyped-def]
        if room_taken:
            for reserve in ctx.run_dir.glob("*.reserve"):
                reserve.unlink()
        disk.fill()
        try:
            (ctx.run_dir / "adapter_model.safetensors").write_bytes(bytes(1 << 20))
        except OSError as e:
            raised.append(e)
            raise
        raise AssertionError("1 MiB fitted on a full disk")

    return TrainStep("quick", SFT_STEP.export, train)


def _run(job: JobConfig, step: TrainStep) -> object:
    from _jobsteps import FakeGateway, plus_one_suite

    from trainer import run_job

    gw = FakeGateway({"policy-v0": set()})
    return run_job(job, suite=plus_one_suite(10), train_step=step, admin=gw.admin(), chat_client=gw.chat())


def _lock_is_free(job: JobConfig, runs: Path) -> bool:
    from trainer import JobLock

    lock = JobLock(job.collector_db, runs)
    got = lock.try_acquire()
    lock.release()
    return got


def test_a_job_failing_on_a_full_disk_is_recorded_as_disk_full_and_raises_its_own_error(
        disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken variants: no room set aside for the record, so the result.json write hit the same full disk and the
    run's reason was lost (at best "died without a result"); a reason that is the bare OSError ("OSError: [Errno 28]
    No space left on device"), naming neither the path nor the free bytes; the job lock left held."""
    from trainer import list_runs

    job = _job_on(disk, monkeypatch)
    runs = disk.path / "trainer" / "runs"
    raised: list[OSError] = []
    with pytest.raises(OSError) as failed:
        _run(job, _filling_step(disk, raised))
    assert failed.value is raised[0] and failed.value.errno == errno.ENOSPC  # the job's own error, not the record's
    [run] = list_runs(runs)
    assert run["status"] == "failed", run
    found = re.match(r"disk full: writing (\S+) failed \(No space left on device\); (\d+) bytes free on the disk "
                     r"holding (\S+);", run["reason"])
    assert found, run["reason"]
    assert found[1] == str(runs / run["run_id"]) and found[3] == str(runs / run["run_id"])
    assert int(found[2]) < 1 << 20  # measured on the disk as it is: the filler took the rest
    assert not list((runs / run["run_id"]).glob("*.reserve"))  # its room went to the record
    assert _lock_is_free(job, runs)


def test_a_run_whose_record_the_full_disk_refuses_is_not_shown_running(
        disk: SmallDisk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Broken variants: "record() raising inside except leaves running": the job raised the record's ENOSPC (its own
    error masked) and `trainer runs` showed the run "running" for as long as the job's process lived (a scheduler:
    forever), because liveness was only "its pid is alive"; also a job lock left held. Checked in this process (the
    job's, still alive) and through `trainer runs --json` in another."""
    from trainer import list_runs

    job = _job_on(disk, monkeypatch)
    runs = disk.path / "trainer" / "runs"
    raised: list[OSError] = []
    with caplog.at_level(logging.ERROR, logger="looplift.trainer"), pytest.raises(OSError) as failed:
        _run(job, _filling_step(disk, raised, room_taken=True))
    assert failed.value is raised[0]
    assert any("could not record run" in r.getMessage() and "disk full: writing" in r.getMessage()
               for r in caplog.records), caplog.text  # the secondary error is logged, with what it could not record
    [run] = list_runs(runs)
    assert not (runs / run["run_id"] / "result.json").exists()  # the record really did not fit
    assert run["status"] == "failed" and run["reason"].startswith("died without a result"), run
    assert run["pid"] == os.getpid()  # its process lives on
    cli = subprocess.run([sys.executable, "-m", "looplift", "trainer", "runs", "--json", "--runs-dir", str(runs)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert [(r["run_id"], r["status"]) for r in json.loads(cli.stdout)] == [(run["run_id"], "failed")]
    assert _lock_is_free(job, runs)


def test_a_disk_too_full_to_start_a_run_leaves_no_run_behind(disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken variants: the start record's ENOSPC raised bare ("[Errno 28] No space left on device", no path, no
    fix), leaving an empty run directory that `trainer runs` lists as a run killed before recording anything."""
    from trainer import DiskSpaceError, list_runs

    job = _job_on(disk, monkeypatch)
    runs = disk.path / "trainer" / "runs"
    disk.fill()
    with pytest.raises(DiskSpaceError, match=r"^cannot start a retrain run: disk full: writing \S+ failed \(No space "
                                             r"left on device\); \d+ bytes free on the disk holding"):
        _run(job, _filling_step(disk, []))
    assert list_runs(runs) == []
    assert _lock_is_free(job, runs)


def test_the_scheduler_reports_a_full_disk_by_the_jobs_error_and_runs_again_once_freed(
        disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken variants: the scheduler's line as it was ("the retrain job failed: OSError: [Errno 28] No space left on
    device (recorded in `trainer runs`)": no path, no free bytes, and claiming a record that the disk refused); the
    run left "running" in the history (liveness by pid alone: the scheduler's process lives on); the job lock left
    held, so the next trigger, once space is back, is skipped as "another retrain job is running"."""
    from _jobsteps import FakeGateway, plus_one_suite, quick_step

    from trainer import ScheduleConfig, Scheduler, TrainStep, list_runs

    job = _job_on(disk, monkeypatch)
    runs = disk.path / "trainer" / "runs"
    gw = FakeGateway({"policy-v0": set()})
    gw.next_skill = set(range(10))
    clock = [datetime(2026, 3, 1, 10, 0, 30, tzinfo=timezone.utc)]
    said: list[str] = []
    trains = iter([_filling_step(disk, [], room_taken=True), quick_step])  # the first job fills the disk

    step = TrainStep("quick", quick_step.export, lambda ctx, data: next(trains).train(ctx, data))
    sched = Scheduler(job, ScheduleConfig(cron="* * * * *"), plus_one_suite(10), status=said.append,
                      now=lambda: clock[0], job_kwargs={"train_step": step, "admin": gw.admin(), "chat_client": gw.chat()})
    clock[0] = clock[0].replace(minute=1)
    assert sched.tick()
    [failure] = [m for m in said if m.startswith("the retrain job failed")]
    assert failure.startswith("the retrain job failed: disk full: writing ") and "(see `trainer runs`)" in failure
    assert [r["status"] for r in list_runs(runs)] == ["failed"]
    disk.free()
    clock[0] = clock[0].replace(minute=2)
    assert sched.tick()
    assert [r.status for r in sched.results] == ["promoted"], said
    assert [r["status"] for r in list_runs(runs)] == ["failed", "promoted"]


def test_the_job_lock_is_taken_and_released_on_a_full_disk(disk: SmallDisk) -> None:
    """Broken variant: the holder's name ("host:pid") written through a buffer into the lock file, so a full disk
    failed `try_acquire` with ENOSPC (or, flushed at close, `release`), and no job could run until space was freed."""
    from trainer import JobLock

    db_url = f"sqlite:///{disk.path / 'collector.db'}"
    disk.fill()
    lock = JobLock(db_url, disk.path)
    assert lock.try_acquire()
    other = JobLock(db_url, disk.path)
    assert not other.try_acquire()  # still the one lock
    lock.release()
    assert other.try_acquire()
    other.release()
