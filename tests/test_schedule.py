"""The scheduler's triggers (cron on a given clock, new data, drift) on a real collector database with the
gateway faked at its transport; the job lock across processes (two `trainer schedule` processes racing,
on SQLite and Postgres); SIGTERM during a `trainer run` leaves the run recorded as interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from _jobsteps import FakeGateway, add_trajectories, plus_one_suite, quick_step

from sdk.infra import env_without_config
from trainer import JobConfig, JobLock, ScheduleConfig, Scheduler, list_runs

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _job(tmp_path: Path, db_url: str) -> JobConfig:
    return JobConfig(base_model_dir=tmp_path, collector_db=db_url, app="shop", runs_dir=tmp_path / "runs",
                     min_examples=1)


def test_cron_fires_once_per_scheduled_time(tmp_path: Path, db_url: str) -> None:
    clock = [datetime(2026, 3, 1, 10, 3, tzinfo=timezone.utc)]
    sched = Scheduler(_job(tmp_path, db_url), ScheduleConfig(cron="*/5 * * * *"), plus_one_suite(2),
                      now=lambda: clock[0])
    assert sched.due() is None
    clock[0] = clock[0].replace(minute=5)
    assert sched.due() == "cron '*/5 * * * *'"
    assert sched.due() is None  # fired for 10:05; next at 10:10
    clock[0] = clock[0].replace(minute=11)
    assert sched.due() is not None


def test_cron_survives_clock_jumps_without_a_storm_or_a_repeat(tmp_path: Path, db_url: str) -> None:
    """The wall clock stepped (NTP, a VM resumed): forward over many slots fires once, not once per missed slot;
    back over a slot already fired does not fire it again, and the next slot still fires. Mutants: the next
    slot advanced by one period instead of computed from now (a forward jump fires 288 times), the next slot
    recomputed from the clock at every poll (a slot is missed or fired twice)."""
    clock = [datetime(2026, 3, 1, 10, 3, tzinfo=timezone.utc)]
    sched = Scheduler(_job(tmp_path, db_url), ScheduleConfig(cron="*/5 * * * *"), plus_one_suite(2),
                      now=lambda: clock[0])
    clock[0] += timedelta(days=1)  # 288 slots passed while the clock was away
    assert sched.due() is not None and sched.due() is None
    clock[0] = clock[0].replace(minute=9)  # 10:09 the next day: the 10:05 slot
    assert sched.due() is not None
    clock[0] -= timedelta(minutes=5)  # back to 10:04: 10:05 was fired already
    assert sched.due() is None
    clock[0] = clock[0].replace(minute=6)
    assert sched.due() is None  # 10:06, past 10:05 again: not twice
    clock[0] = clock[0].replace(minute=10)
    assert sched.due() is not None  # 10:10: the next slot


def _new_data_scheduler(tmp_path: Path, db_url: str, new_data: int) -> Scheduler:
    """A new-data scheduler whose jobs train the quick step against a fake gateway that promotes."""
    gw = FakeGateway({"policy-v0": set()})
    gw.next_skill = set(range(10))
    return Scheduler(_job(tmp_path, db_url), ScheduleConfig(new_data=new_data), plus_one_suite(10),
                     job_kwargs={"train_step": quick_step, "admin": gw.admin(), "chat_client": gw.chat()})


def test_new_data_counts_scored_trajectories_since_the_last_export(tmp_path: Path, db_url: str) -> None:
    sched = _new_data_scheduler(tmp_path, db_url, 5)
    add_trajectories(db_url, 4)
    add_trajectories(db_url, 3, app="other", start=100)  # another app's data does not count
    assert sched.new_data_count() == 4 and not sched.tick()
    add_trajectories(db_url, 1, start=4)
    assert sched.tick()
    [res] = sched.results
    assert res.status == "promoted" and res.trigger.startswith("new-data: 5 new scored trajectories")
    assert sched.new_data_count() == 0 and sched.due() is None  # counted from this run's export on
    add_trajectories(db_url, 5, start=50)
    assert sched.due() is not None


@pytest.mark.parametrize("step", [timedelta(days=1), -timedelta(days=1)], ids=["ahead", "behind"])
def test_new_data_counts_in_ingest_order_whatever_the_clocks_did(tmp_path: Path, db_url: str,
                                                                 step: timedelta) -> None:
    """The trainer's clock a day ahead of the collector's when it exported (or a day behind: the collector's
    clock stepped forward since). Catches: the trigger counting by `created_at` against `exported_at` again
    (ahead: the next day's data never fires it; behind: the data already exported fires it again), and a run
    record without the ingest mark."""
    sched = _new_data_scheduler(tmp_path, db_url, 3)
    add_trajectories(db_url, 3)
    assert sched.tick()
    [res] = sched.results
    assert res.status == "promoted" and res.exported_mark == 3
    record = tmp_path / "runs" / res.run_id / "result.json"
    rec = json.loads(record.read_text())
    rec["exported_at"] = (datetime.fromisoformat(rec["exported_at"]) + step).isoformat()
    record.write_text(json.dumps(rec))
    assert sched.new_data_count() == 0 and sched.due() is None
    add_trajectories(db_url, 3, start=10)
    assert sched.new_data_count() == 3 and sched.due() is not None


def test_a_run_after_the_clock_was_set_back_is_still_the_newest(tmp_path: Path, db_url: str) -> None:
    """The last run was recorded a day ahead (the clock was set back since). The next run must sort after it, or
    every reader of "the newest run" (this trigger, `trainer runs`, the unload of left candidates) takes the old
    one. Catches: a run id from the clock alone (the trigger fires again at once on the data just trained on)."""
    ahead = datetime.now(timezone.utc) + timedelta(days=1)
    old = tmp_path / "runs" / (ahead.strftime("%Y%m%dT%H%M%S%fZ") + "-beef")
    old.mkdir(parents=True)
    (old / "result.json").write_text(json.dumps({"run_id": old.name, "status": "rejected", "reason": "worse",
                                                 "exported_at": ahead.isoformat(), "exported_mark": 0}))
    sched = _new_data_scheduler(tmp_path, db_url, 2)
    add_trajectories(db_url, 2)
    assert sched.tick()
    [res] = sched.results
    runs = list_runs(tmp_path / "runs")
    assert [r["run_id"] for r in runs] == [old.name, res.run_id] and res.exported_mark == 2
    assert sched.new_data_count() == 0 and sched.due() is None


def test_new_data_of_runs_recorded_before_the_mark_counts_by_time(tmp_path: Path, db_url: str) -> None:
    """A run recorded before `exported_mark` existed: the trigger counts by its export time, as it did.
    Catches: such a record read as "everything is new" (a mark of None taken for 0)."""
    job = _job(tmp_path, db_url)
    add_trajectories(db_url, 4)
    run = tmp_path / "runs" / "20260101T000000000000Z-0000"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({
        "run_id": run.name, "status": "rejected", "exported_at": datetime.now(timezone.utc).isoformat()}))
    sched = Scheduler(job, ScheduleConfig(new_data=2), plus_one_suite(2))
    assert sched.new_data_count() == 0
    add_trajectories(db_url, 2, start=10)
    assert sched.new_data_count() == 2


def test_drift_fires_when_live_success_falls_below_the_gate(tmp_path: Path, db_url: str) -> None:
    job = _job(tmp_path, db_url)
    run = tmp_path / "runs" / "20260101T000000000000Z-0000"
    run.mkdir(parents=True)
    # The gate measured policy-v1 at 90% when it promoted it (an old run: its export is outside the window).
    (run / "result.json").write_text(json.dumps({
        "run_id": run.name, "status": "promoted", "candidate": "policy-v1", "candidate_success": 0.9,
        "serving": "policy-v0", "serving_success": 0.4,
        "exported_at": (datetime.now(timezone.utc) - timedelta(days=3)).isoformat()}))
    gw = FakeGateway({}, serving="policy-v1")
    sched = Scheduler(job, ScheduleConfig(drift=0.1, drift_min_episodes=20), plus_one_suite(2), admin=gw.admin)
    add_trajectories(db_url, 15, version="policy-v1")  # 15 live successes: too few to judge
    assert sched.drift_reading() is None
    add_trajectories(db_url, 15, start=15, version="policy-v1", reward=0.0)
    d = sched.drift_reading()
    assert d is not None and d["live"] == 0.5 and d["measured"] == 0.9 and d["n"] == 30
    trigger = sched.due()
    assert trigger is not None and trigger.startswith("drift: policy-v1 live success 50% over 30 episodes < gate 90%")
    add_trajectories(db_url, 60, start=100, version="policy-v1")  # 75 of 90 succeed: 83%, within 10 points
    assert sched.due() is None


def _race_env(tmp_path: Path) -> dict[str, str]:
    env = env_without_config()
    env.update(LOOPLIFT_HOME=str(tmp_path / "home"), PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}",
               LOOPLIFT_TEST_MARKER=str(tmp_path / "training"), LOOPLIFT_TEST_RELEASE=str(tmp_path / "release"))
    return env


def _common_args(tmp_path: Path, db_url: str) -> list[str]:
    plus_one = tmp_path / "suite.jsonl"
    plus_one.write_text("".join(json.dumps({"id": f"q{i}", "turns": [f"What is {i}+1?"], "expected": str(i + 1)}) + "\n"
                                for i in range(5)))
    (tmp_path / "base").mkdir(exist_ok=True)
    return ["--eval", str(plus_one), "--db", db_url, "--gateway", "http://127.0.0.1:9", "--gateway-wait", "0",
            "--token", "t", "--base-model", str(tmp_path / "base"), "--runs-dir", str(tmp_path / "runs"), "--app", "shop",
            "--min-examples", "1", "--algo", "_jobsteps:slow_step"]


def _wait_for(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.slow
def test_two_schedulers_racing_never_overlap(tmp_path: Path, any_db_url: str) -> None:
    add_trajectories(any_db_url, 3)
    env = _race_env(tmp_path)
    args = [str(BIN / "trainer"), "schedule", "--new-data", "1", "--poll", "0.2", "--max-runs", "1",
            *_common_args(tmp_path, any_db_url)]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        _wait_for(lambda: list(tmp_path.glob("training.*")), 120, "no scheduler started training")
        # The other scheduler fired too, found the lock held and gave up while the winner is still training.
        loser = next(p for p in procs if f"training.{p.pid}" not in {m.name for m in tmp_path.glob("training.*")})
        out, err = loser.communicate(timeout=120)
        assert loser.returncode == 0, err
        assert "another retrain job is running" in err
        assert len(list(tmp_path.glob("training.*"))) == 1
        (tmp_path / "release").touch()
        winner = next(p for p in procs if p is not loser)
        _, werr = winner.communicate(timeout=120)
        assert winner.returncode == 0, werr
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    runs = list_runs(tmp_path / "runs")
    assert sorted(r["status"] for r in runs) == ["failed", "skipped"]  # failed: no gateway at port 9 to load into
    skipped = next(r for r in runs if r["status"] == "skipped")
    ran = next(r for r in runs if r["status"] == "failed")
    lock_kind = "Postgres advisory lock" if any_db_url.startswith("postgresql") else "file lock"
    assert lock_kind in skipped["reason"] and "cannot reach the gateway" in ran["reason"]
    # The skip happened inside the winner's run (start..finish): they overlapped in time, the jobs did not.
    assert ran["started_at"] < skipped["finished_at"] < ran["finished_at"]
    lock = JobLock(any_db_url, tmp_path / "runs")
    assert lock.try_acquire()  # released by the winner's exit
    lock.release()


@pytest.mark.slow
def test_sigterm_mid_job_records_an_interrupted_run(tmp_path: Path, db_url: str) -> None:
    add_trajectories(db_url, 3)
    env = _race_env(tmp_path)
    p = subprocess.Popen([str(BIN / "trainer"), "run", "--trigger", "cron", *_common_args(tmp_path, db_url)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (tmp_path / f"training.{p.pid}").exists(), 120, "trainer run did not start training")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143 and "interrupted by SIGTERM" in err and "Traceback" not in err
    [run] = list_runs(tmp_path / "runs")
    assert run["status"] == "interrupted" and run["trigger"] == "cron"
    assert "SIGTERM" in run["reason"] and "training" in run["reason"] and run["candidate"] is None
    lock = JobLock(db_url, tmp_path / "runs")
    assert lock.try_acquire()
    lock.release()


@pytest.mark.slow
def test_a_bad_cron_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    env = env_without_config() | {"LOOPLIFT_HOME": str(tmp_path)}
    for cmd in (["looplift", "up", "--retrain", "every night"],
                ["trainer", "schedule", "--cron", "every night", "--eval", "envs:arithmetic_suite"]):
        p = subprocess.run([str(BIN / cmd[0]), *cmd[1:]], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "Traceback" not in p.stderr
        assert "cron expression 'every night' does not parse; write 5 fields" in p.stderr
    assert not (tmp_path / "models").exists()  # `up` refused before building a model or starting vLLM


def test_the_stack_scheduler_stops_a_running_job_when_the_stack_stops(tmp_path: Path, db_url: str,
                                                                       monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from looplift._retrain import plan_retrain, retrain_in_stack

    add_trajectories(db_url, 3)
    monkeypatch.setenv("LOOPLIFT_TEST_MARKER", str(tmp_path / "training"))
    monkeypatch.setenv("LOOPLIFT_TEST_RELEASE", str(tmp_path / "never"))
    args = _common_args(tmp_path, db_url)
    (tmp_path / "looplift.toml").write_text(
        f'[trainer]\neval = "{args[1]}"\nalgo = "_jobsteps:slow_step"\napp = "shop"\nmin_examples = 1\n'
        f'runs_dir = "{tmp_path / "runs"}"\n[schedule]\nnew_data = 1\npoll = "0.1s"\n')
    plan = plan_retrain(tmp_path / "looplift.toml", None, None)  # triggers in the file: the scheduler runs
    assert plan is not None and plan.schedule.new_data == 1 and plan.suite.name == "suite"
    lines: list[str] = []
    with retrain_in_stack(plan, gateway_url="http://127.0.0.1:9", db_url=db_url, admin_token="t",
                          model_dir=tmp_path / "base", say=lines.append, grace_s=30) as scheduler:
        _wait_for(lambda: list(tmp_path.glob("training.*")), 60, "the stack's scheduler did not start a job")
    assert not scheduler.token.in_critical and scheduler.token.requested
    [run] = list_runs(tmp_path / "runs")
    assert run["status"] == "interrupted" and "the stack is stopping" in run["reason"]
    assert run["trigger"].startswith("new-data") and any("scheduler on" in m for m in lines)
    (tmp_path / "plain.toml").write_text('[trainer]\napp = "shop"\n')
    assert plan_retrain(tmp_path / "plain.toml", None, None) is None  # no trigger anywhere: `up` runs no scheduler


def test_window_stats_count_what_the_triggers_read(any_db_url: str) -> None:
    from collector import open_store
    from sdk import Feedback

    add_trajectories(any_db_url, 4, version="policy-v1")
    add_trajectories(any_db_url, 2, start=10, version="policy-v1", reward=0.0)
    add_trajectories(any_db_url, 3, start=20, version="policy-v2", app="other")
    store = open_store(any_db_url)
    try:
        store.add_feedback(Feedback(trajectory_id="shop-10", rating=-1.0), anonymize=False)
        store.add_feedback(Feedback(trajectory_id="shop-0", rating=0.5), anonymize=False)
        w = store.window_stats(app="shop", served_version="policy-v1")
        assert (w.total, w.scored, w.with_outcome, w.successes, w.with_feedback) == (6, 6, 6, 4, 2)
        assert w.success_rate == pytest.approx(4 / 6) and w.mean_feedback == pytest.approx(-0.25)
        assert store.window_stats().total == 9 and store.window_stats(app="other").successes == 3
        later = datetime.now(timezone.utc) + timedelta(seconds=1)
        assert store.window_stats(since=later).total == 0 and store.window_stats(until=later).total == 9
    finally:
        store.close()


def test_the_ingest_mark_orders_stored_and_grown_rows(any_db_url: str) -> None:
    """Every row stored, and a captured session replaced by a longer revision, gets an ingest number above all
    before it; a duplicate gets none. Catches: numbers reused or restarted per batch, a grown session kept at its
    first number (the trigger would miss a conversation that went on), and a replay counted as new."""
    from collector import open_store
    from sdk import Message, Trajectory
    from sdk.wire import REVISION_KEY

    def session(n: int) -> Trajectory:
        msgs = [Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}") for i in range(n)]
        return Trajectory(id="sess-1", app="shop", task_id="chat", model="policy", messages=msgs,
                          metadata={REVISION_KEY: n})

    store = open_store(any_db_url)
    try:
        assert store.ingest_mark() == 0
        add_trajectories(any_db_url, 3)
        first = store.ingest_mark()
        assert first == 3
        store.add_trajectories([session(2)], anonymize=False)
        add_trajectories(any_db_url, 3)  # a replay of the first batch: duplicates
        assert store.ingest_mark() == first + 1 and store.window_stats(after_mark=first).total == 1
        second = store.ingest_mark()
        assert store.add_trajectories([session(4)], anonymize=False).accepted == 1
        assert store.ingest_mark() > second
        assert store.window_stats(after_mark=second).total == 1 and store.window_stats(after_mark=0).total == 4
        add_trajectories(any_db_url, 2, start=100)
        assert store.window_stats(after_mark=second).total == 3 and store.window_stats(app="shop").total == 6
    finally:
        store.close()
