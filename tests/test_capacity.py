"""bench/capacity.py: the capacity table reads its per-core and per-request figures from bench/results/*.json
(cited as file:key=value), so a new measurement changes the table; the load scales what it should."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each test runs bench/capacity.py in a subprocess (seconds each)

ROOT = Path(__file__).resolve().parents[1]


def _plan(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "capacity.py"), "--json", *args],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out)


def _row(plan: dict[str, Any], component: str, needs: str) -> dict[str, Any]:
    return next(r for r in plan["rows"] if r["component"] == component and r["needs"].startswith(needs))


def _resolve(results: Path, cite: str) -> Any:
    """`collector.json:ingest.per_cpu_s` -> the value in that file."""
    name, key = cite.split(":", 1)
    value: Any = json.loads((results / name).read_text())
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key.split(" ")[0].split("(")[0]):
        value = value[int(part[1:-1])] if part.startswith("[") else value[part]
    return value


def test_every_cited_measurement_exists_in_the_results() -> None:
    plan = _plan()
    cites = [c for r in plan["rows"] for b in r["basis"] for c in re.findall(r"(\w+\.json:[\w.\[\]]+)", b)]
    assert any(c.startswith("collector.json") for c in cites) and any(c.startswith("sandboxes.json") for c in cites)
    for cite in cites:
        assert isinstance(_resolve(ROOT / "bench" / "results", cite), (int, float, dict)), cite
    vllm = _row(plan, "vllm", "replicas")
    assert vllm["number"] >= 1 and not vllm["measured"] and "ESTIMATE" in " ".join(vllm["basis"])


def test_a_new_measurement_changes_the_table(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    before = _plan("--results", str(results), "--episodes-per-day", "1e8")
    collector = json.loads((results / "collector.json").read_text())
    collector["ingest"]["per_cpu_s"] /= 4  # ingest four times as expensive
    (results / "collector.json").write_text(json.dumps(collector))
    (results / "gateway.json").write_text(json.dumps({"results": [
        {"mode": "non-stream", "concurrency": 16, "gateway_cpu_ms_per_request": 2.0}]}))
    after = _plan("--results", str(results), "--episodes-per-day", "1e8")
    w0, w1 = (_row(p, "collector", "ingest workers")["number"] for p in (before, after))
    assert w1 >= 3 * w0 and w0 >= 2
    gw = _row(after, "gateway", "cores")
    peak_requests = 1e8 / 86400 * 3 * 4
    assert abs(gw["number"] - peak_requests * 2.0 / 1000 / 0.6) < 1e-6 and gw["measured"]
    assert "gateway.json:results[0](non-stream,c=16).gateway_cpu_ms_per_request" in gw["basis"][0]
    assert _row(before, "gateway", "cores")["number"] is None or (ROOT / "bench" / "results" / "gateway.json").exists()


def test_the_load_scales_sandboxes_and_writes() -> None:
    one, two = _plan(), _plan("--episodes-per-day", "2e6")
    for component, needs in (("postgres", "write rate"), ("sandboxes", "sandboxes in use")):
        a, b = _row(one, component, needs)["number"], _row(two, component, needs)["number"]
        assert abs(b - 2 * a) <= 1, (component, a, b)
    size = json.loads((ROOT / "bench" / "results" / "collector.json").read_text())["mean_trajectory_bytes"]
    big = _plan("--trajectory-bytes", str(10 * size))
    a, b = (_row(p, "postgres", "storage")["number"] for p in (one, big))
    assert abs(b - 10 * a) < 1e-6 * b and "--trajectory-bytes" in _row(big, "postgres", "storage")["basis"][0]
    measured = _plan("--replica-decode-tokens-per-s", "1e9")
    assert _row(measured, "vllm", "replicas")["measured"]
