"""`looplift status` without a GPU or vLLM: the parts that answer are reported, the ones that do not are one line
each and exit 1. (On a running stack: `test_e2e.py::test_up_serves_the_example_and_the_collector`.)"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _jobsteps import add_trajectories

from collector import CollectorSettings, serve_in_thread
from sdk.infra import atomic_write_json

pytestmark = pytest.mark.slow  # each test runs `looplift status` in a subprocess (seconds each)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "LOOPLIFT_HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "looplift", "status", *args], env=env, cwd=home, capture_output=True,
                          text=True, timeout=120)


def test_nothing_running_is_one_line_per_part_and_exit_1(tmp_path: Path) -> None:
    gw, col = _closed_port(), _closed_port()
    p = _status(tmp_path, "--gateway", f"http://127.0.0.1:{gw}", "--collector", f"http://127.0.0.1:{col}", "--json")
    assert p.returncode == 1, p.stderr
    s = json.loads(p.stdout)
    assert set(s["unreachable"]) == {"gateway", "collector", "collector database"} and s["healthy"] is False
    assert "no database at" in s["unreachable"]["collector database"]  # status never creates one
    assert not (tmp_path / "collector.db").exists()
    assert f"127.0.0.1:{gw}" in s["unreachable"]["gateway"] and "ConnectError" in s["unreachable"]["gateway"]
    text = _status(tmp_path, "--gateway", f"http://127.0.0.1:{gw}", "--collector", f"http://127.0.0.1:{col}")
    assert text.returncode == 1 and "Traceback" not in text.stdout + text.stderr
    assert f"gateway not reachable: http://127.0.0.1:{gw}" in text.stdout
    assert "next run   not scheduled" in text.stdout


def test_collector_runs_and_schedule_are_read_from_their_owners(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'collector.db'}"
    add_trajectories(db, 7, app="shop")
    runs = tmp_path / "trainer" / "runs" / "20260101T030000000000Z-abcd"
    runs.mkdir(parents=True)
    atomic_write_json(runs / "result.json", {"run_id": runs.name, "status": "failed", "reason": "OSError: disk full",
                                             "trigger": "cron '0 3 * * *'", "exported_at": "2026-01-01T03:00:00+00:00"})
    (tmp_path / "looplift.toml").write_text('[trainer]\napp = "shop"\n\n[schedule]\ncron = "0 3 * * *"\nnew_data = 10\n')
    (tmp_path / "admin.token").write_text("tok\n")
    with serve_in_thread(CollectorSettings(db_url=db, admin_token="tok")) as col:
        p = _status(tmp_path, "--gateway", f"http://127.0.0.1:{_closed_port()}", "--collector", col.url, "--db", db,
                    "--json")
    s = json.loads(p.stdout)
    assert p.returncode == 1 and set(s["unreachable"]) == {"gateway"}
    assert s["collector"]["status"] == "ok" and s["collector"]["langfuse"] == {"enabled": False}
    assert s["pending"]["scored"] == 7 and s["pending"]["app"] == "shop"  # ingested after that run's export snapshot
    assert s["schedule"]["cron"] == "0 3 * * *" and s["schedule"]["cron_next"].endswith("Z")
    assert s["schedule"]["new_data_left"] == 3
    assert any("last retrain run" in x and "failed" in x for x in s["problems"])
    assert s["runs"]["last"]["status"] == "failed"
