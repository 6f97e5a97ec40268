"""The retrain job's decisions without vLLM: a real collector database (SQLite) and export, the gateway
faked at its HTTP transport (admin API + chat completions), a torch-free train step. One property each:
promote, idempotence, reject noise (and unload the rejected candidate), refused adapter, too little data, lock held,
interrupted and redone."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from _jobsteps import FakeGateway, add_trajectories, plus_one_suite, quick_step

from trainer import JobConfig, JobInterrupted, JobLock, PublishError, StopToken, TrainStep, list_runs, run_job
from trainer._steps import SFT_STEP


@pytest.fixture
def job(tmp_path: Path, db_url: str) -> JobConfig:
    add_trajectories(db_url, 12)
    return JobConfig(base_model_dir=tmp_path / "base", collector_db=db_url, app="shop", eval="tests:plus_one",
                     runs_dir=tmp_path / "runs")


def _run(job: JobConfig, gw: FakeGateway, step: TrainStep = quick_step, **kw: object):  # type: ignore[no-untyped-def]
    return run_job(job, suite=plus_one_suite(40), train_step=step, admin=gw.admin(), chat_client=gw.chat(), **kw)


def test_a_real_improvement_is_promoted_with_its_figures(job: JobConfig) -> None:
    gw = FakeGateway({"policy-v0": set(range(10))})
    gw.next_skill = set(range(40))
    res = _run(job, gw, trigger="cron '0 3 * * *'")
    assert res.status == "promoted" and gw.serving == "policy-v1" and gw.promoted == ["policy-v1"]
    # The gate decides on the 27 selection tasks (q0-q5 of the serving version's q0-q9 among them) and reports
    # on the other 13 (q6-q9 among them), which decide nothing.
    assert (res.candidate_success, res.serving_success) == (1.0, 6 / 27)
    assert (res.candidate_report_success, res.serving_report_success) == (1.0, 4 / 13)
    g = res.gate
    assert g is not None and (g["n"], g["b"], g["c"], g["n_report"]) == (27, 21, 0, 13)
    assert g["p_value"] == pytest.approx(2.0**-21) and (g["k"], g["tested"]) == (1, True)
    assert g["test"] == "exact McNemar, one-sided" and g["alpha"] == 0.05 and g["slices"][0]["slice"] == "all"
    recorded = json.loads((Path(job.runs_dir) / res.run_id / "result.json").read_text())  # type: ignore[arg-type]
    assert recorded["status"] == "promoted" and recorded["gate"]["b"] == 21 and recorded["trigger"].startswith("cron")
    assert "admin_token" not in json.loads((Path(job.runs_dir) / res.run_id / "config.json").read_text())  # type: ignore[arg-type]


def test_the_same_data_again_is_skipped(job: JobConfig) -> None:
    gw = FakeGateway({"policy-v0": set()})
    gw.next_skill = set(range(40))
    first = _run(job, gw)
    second = _run(job, gw)
    assert first.status == "promoted"
    assert second.status == "skipped" and f"no new data since run {first.run_id}" in second.reason
    assert gw.versions == ["policy-v0", "policy-v1"]  # nothing was trained or loaded the second time


def test_a_one_task_wobble_is_rejected_and_the_serving_version_kept(job: JobConfig) -> None:
    gw = FakeGateway({"policy-v0": set(range(30))})
    gw.next_skill = set(range(31))  # 75% -> 77.5%: b=1, c=0, p=0.5
    res = _run(job, gw)
    assert res.status == "rejected" and gw.serving == "policy-v0" and gw.promoted == []
    assert "not better with confidence" in res.reason and res.gate is not None and res.gate["p_value"] == 0.5


def test_a_rejected_candidate_is_unloaded_after_its_evaluation(job: JobConfig) -> None:
    """Mutants: no unload on rejection (every rejected retrain leaves an adapter loaded in vLLM: the soak's leak,
    issue 22), the unload before the gate's evaluation (the candidate's episodes would find no adapter)."""
    gw = FakeGateway({"policy-v0": set(range(30))})
    gw.next_skill = set(range(31))  # b=1, c=0: rejected
    res = _run(job, gw)
    assert res.status == "rejected" and gw.unloaded == ["policy-v1"] and gw.serving == "policy-v0"
    assert gw.events.index("unload policy-v1") > max(i for i, e in enumerate(gw.events) if e == "chat policy-v1")
    assert "still loaded" not in res.reason


def test_a_failed_unload_is_a_note_in_the_reason_not_the_runs_failure(job: JobConfig,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Mutants: the unload's error raised (the run recorded as failed and redone, though the gate decided),
    the failure swallowed without a trace (the leaked adapter unnoticed: no warning, nothing in the run)."""
    gw = FakeGateway({"policy-v0": set(range(30))})
    gw.next_skill = set(range(31))
    gw.refuse_unload = True
    res = _run(job, gw)
    assert res.status == "rejected" and "unload policy-v1" in gw.events and gw.unloaded == []
    assert res.reason.startswith("not better with confidence")
    assert "policy-v1 is still loaded" in res.reason and "looplift server unload policy-v1" in res.reason
    assert json.loads((Path(job.runs_dir) / res.run_id / "result.json").read_text())["reason"] == res.reason  # type: ignore[arg-type]
    assert any(r.levelname == "WARNING" and "policy-v1" in r.getMessage() for r in caplog.records)


def test_the_next_run_unloads_what_an_earlier_run_left_loaded(job: JobConfig, db_url: str) -> None:
    """Mutants: no tidying (every killed or unload-refused retrain leaves its adapter in vLLM for good: issue 22's
    soak), the run's own candidate unloaded (its gate would find no adapter)."""
    gw = FakeGateway({"policy-v0": set(range(20))})
    gw.next_skill = set(range(21))
    gw.refuse_unload = True
    assert _run(job, gw).status == "rejected" and gw.unloaded == []  # policy-v1 stays loaded
    gw.refuse_unload = False
    add_trajectories(db_url, 4, start=100)  # new data: not "nothing new"
    gw.next_skill = set(range(40))
    res = _run(job, gw)
    assert res.status == "promoted" and gw.serving == "policy-v2" and gw.unloaded == ["policy-v1"]
    assert gw.events.index("unload policy-v1") < gw.events.index("chat policy-v2")


def test_left_loaded_names_only_never_served_candidates_of_ended_runs(tmp_path: Path) -> None:
    """Mutants: any status (a promoted run's version, or a canary's, unloaded), the history check dropped (a
    version that served and may be rolled back to), the state or serving check dropped, a running run's candidate
    (the job's own) named, a version outside the runs dir named."""
    import os
    import socket
    from datetime import datetime, timezone

    from server import HistoryEvent, VersionInfo, VersionsView
    from trainer._runs import left_loaded

    runs = tmp_path / "runs"
    for run_id, status in (("A", None), ("B", "promoted"), ("C", "rejected"), ("D", None), ("E", "canary")):
        (runs / run_id / "adapter").mkdir(parents=True)
        pid = os.getpid() if run_id == "D" else 2**22 + 1  # D: this process, still running; A: killed
        (runs / run_id / "run.json").write_text(json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": pid}))
        if status:
            (runs / run_id / "result.json").write_text(json.dumps({"run_id": run_id, "status": status}))
    now = datetime.now(timezone.utc)

    def v(name: str, run: str, state: str = "loaded", serving: bool = False) -> VersionInfo:
        path = str(runs / run / "adapter") if run else str(tmp_path / "elsewhere")
        return VersionInfo(name=name, adapter_path=path, state=state, created_at=now, serving=serving)  # type: ignore[arg-type]

    view = VersionsView(alias="policy", serving="s", versions=[
        VersionInfo(name="base", adapter_path=None, state="loaded", created_at=now),
        v("a", "A"), v("b", "B"), v("c", "C"), v("c-served", "C"), v("c-previous", "C"), v("c-unloaded", "C", state="unloaded"),
        v("d", "D"), v("e", "E"), v("s", "A", serving=True), v("x", "")],
        history=[HistoryEvent(at=now, action="rollback", version="c-served", previous="gone"),
                 HistoryEvent(at=now, action="promote", version="gone", previous="c-previous")])
    assert left_loaded(runs, view) == [("a", "A", "interrupted"), ("c", "C", "rejected")]


def test_a_promoted_candidate_is_not_unloaded(job: JobConfig) -> None:
    """Mutant: the unload on every decision (the version just promoted would be asked to unload)."""
    gw = FakeGateway({"policy-v0": set()})
    gw.next_skill = set(range(40))
    assert _run(job, gw).status == "promoted" and not any(e.startswith("unload") for e in gw.events)


def test_a_refused_adapter_raises_publish_error_naming_the_run(job: JobConfig) -> None:
    gw = FakeGateway({"policy-v0": set()}, refuse=True)
    with pytest.raises(PublishError, match=r"could not load the adapter from run (\S+) into the gateway") as err:
        _run(job, gw)
    run = list_runs(Path(job.runs_dir))[-1]  # type: ignore[arg-type]
    assert run["run_id"] in str(err.value) and run["status"] == "failed" and "rank 3" in run["reason"]
    assert gw.serving == "policy-v0"


def test_too_little_data_is_skipped(tmp_path: Path, db_url: str) -> None:
    add_trajectories(db_url, 3)
    job = JobConfig(base_model_dir=tmp_path, collector_db=db_url, runs_dir=tmp_path / "runs")
    res = _run(job, FakeGateway({}))
    assert res.status == "skipped" and res.reason == "only 3 examples (< 8)" and res.exported == 3


def test_a_job_finding_the_lock_held_is_skipped(job: JobConfig) -> None:
    other = JobLock(job.collector_db, Path(job.runs_dir))  # type: ignore[arg-type]
    assert other.try_acquire()
    try:
        res = _run(job, FakeGateway({}))
    finally:
        other.release()
    assert res.status == "skipped" and "another retrain job is running" in res.reason and "file lock" in res.reason


def test_a_stop_mid_training_is_recorded_as_interrupted_and_redone(job: JobConfig) -> None:
    gw = FakeGateway({"policy-v0": set()})
    gw.next_skill = set(range(40))
    stop = StopToken()
    started = threading.Event()

    def train(ctx, data):  # type: ignore[no-untyped-def]
        started.set()
        stop.request("SIGTERM")
        ctx.check_stop()  # what every optimizer step does
        raise AssertionError("not reached")

    with pytest.raises(JobInterrupted):
        _run(job, gw, step=TrainStep("quick", SFT_STEP.export, train), stop=stop)
    run = list_runs(Path(job.runs_dir))[-1]  # type: ignore[arg-type]
    assert run["status"] == "interrupted" and "SIGTERM" in run["reason"] and "training" in run["reason"]
    assert gw.serving == "policy-v0" and gw.versions == ["policy-v0"]
    # The same data is not "nothing new": the next trigger redoes the run.
    again = _run(job, gw)
    assert again.status == "promoted"


def test_runs_without_a_result_show_as_interrupted_or_running(tmp_path: Path) -> None:
    import os
    import socket

    dead, live = tmp_path / "runs" / "20260101T000000000000Z-abcd", tmp_path / "runs" / "20260102T000000000000Z-abcd"
    for d, pid in ((dead, 2**22 + 1), (live, os.getpid())):  # 2**22+1: above the default pid_max, never a process
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"run_id": d.name, "trigger": "cron", "started_at": "2026-01-01",
                                                "host": socket.gethostname(), "pid": pid}))
    first, second = list_runs(tmp_path / "runs")
    assert first["status"] == "interrupted" and first["trigger"] == "cron" and "killed" in first["reason"]
    assert second["status"] == "running"


def test_a_run_whose_job_ended_without_a_result_is_failed_not_running_while_its_process_lives(tmp_path: Path) -> None:
    """Broken variant: liveness by pid alone, so a run whose job could not write its result (a full disk) showed
    "running" for as long as its process lived, forever for a scheduler inside `looplift up`. The run lock
    (`RunLock`, an flock on the run directory) is held exactly while the job runs, in this process or another."""
    import os
    import socket

    from trainer._lock import RunLock

    run = tmp_path / "runs" / "20260101T000000000000Z-abcd"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "trigger": "cron", "host": socket.gethostname(),
                                              "pid": os.getpid(), "run_lock": True}))
    with RunLock(run) as alive:
        assert alive.held
        [shown] = list_runs(tmp_path / "runs")
        assert shown["status"] == "running"
    [shown] = list_runs(tmp_path / "runs")
    assert shown["status"] == "failed" and shown["reason"].startswith("died without a result"), shown


@pytest.mark.slow
def test_every_run_is_published_to_the_collector_for_its_dashboard(job: JobConfig) -> None:
    from collector import CollectorSettings, create_app
    from fastapi.testclient import TestClient

    gw = FakeGateway({"policy-v0": set(range(10))})
    gw.next_skill = set(range(40))
    first = _run(job, gw, trigger="new-data: 12 new")
    second = _run(job, gw)  # the same data again: skipped, published too
    app = create_app(CollectorSettings(db_url=job.collector_db, admin_token="t"))
    with TestClient(app) as client:
        runs = client.get("/v1/dashboard/runs", headers={"Authorization": "Bearer t"}).json()
    assert [(r["run_id"], r["status"]) for r in runs] == [(first.run_id, "promoted"), (second.run_id, "skipped")]
    assert runs[0]["trigger"] == "new-data: 12 new" and runs[0]["gate"]["b"] == 21
    lo, hi = runs[0]["candidate_ci"]  # 27/27 on the gate's selection split: the 95% Wilson interval is [0.875, 1]
    assert 0.87 < lo < 0.88 and hi == 1.0


def test_a_collector_that_cannot_take_the_record_costs_a_warning_not_the_run(tmp_path: Path) -> None:
    from trainer._runs import publish_run

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert publish_run(f"sqlite:///{blocker}/collector.db", {"run_id": "r1", "status": "promoted"}) is False
