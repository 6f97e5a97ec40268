"""The suite's cost ledger and budget (tests/_cost.py, sdk/infra/_cost.py): events from any process land in one
file, charged to the test that was running; a kind over its budget names the tests that started the extra ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _cost import Event, over_budget, read_ledger, report

from sdk.infra import COST_LOG_ENV, COST_TAG_ENV, env_without_config, record_cost


def test_record_cost_appends_one_line_per_event_with_the_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "cost.jsonl"
    monkeypatch.setenv(COST_LOG_ENV, str(ledger))
    monkeypatch.setenv(COST_TAG_ENV, "tests/x.py::t")
    record_cost("vllm", "m/model --tool-call-parser hermes", 41.26)
    record_cost("stack", "looplift up")
    events = read_ledger(ledger)
    assert events == [Event("vllm", "m/model --tool-call-parser hermes", 41.3, "tests/x.py::t"),
                      Event("stack", "looplift up", None, "tests/x.py::t")]


def test_a_child_process_charges_the_test_that_started_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "cost.jsonl"
    monkeypatch.setenv(COST_LOG_ENV, str(ledger))
    monkeypatch.setenv(COST_TAG_ENV, "tests/y.py::child")
    monkeypatch.setenv("LOOPLIFT_HOME", str(tmp_path))  # configuration: stripped for the child
    env = env_without_config()
    assert "LOOPLIFT_HOME" not in env and env[COST_LOG_ENV] == str(ledger)
    subprocess.run([sys.executable, "-c", "from sdk.infra import record_cost; record_cost('model_build', 'tiny')"],
                   env=env, check=True)
    assert read_ledger(ledger) == [Event("model_build", "tiny", None, "tests/y.py::child")]


def test_without_a_ledger_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COST_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    record_cost("vllm", "m")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_kind_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COST_LOG_ENV, str(tmp_path / "cost.jsonl"))
    with pytest.raises(ValueError, match="unknown cost kind 'vlm'"):
        record_cost("vlm", "m")


def test_a_broken_line_is_skipped(tmp_path: Path) -> None:
    ledger = tmp_path / "cost.jsonl"
    good = json.dumps({"kind": "vllm", "what": "m", "seconds": 1.0, "tag": "t"})
    ledger.write_text(f"{good}\n{{\"kind\": \"vl\n{json.dumps({'what': 'no kind'})}\n{good}\n")
    assert len(read_ledger(ledger)) == 2


def _events(n: int, kind: str = "vllm") -> list[Event]:
    return [Event(kind, "m", 1.0, f"tests/t.py::test_{i}") for i in range(n)]


def test_at_the_budget_is_not_over() -> None:
    # Catches `>=` for `>`: a run that starts exactly its budget passes.
    assert over_budget(_events(3), {"vllm": 3}) == []


def test_over_the_budget_names_only_the_tests_beyond_it() -> None:
    # Catches naming every test (the first ones were within budget) or the count not being checked at all.
    (line,) = over_budget(_events(5), {"vllm": 3})
    assert line.startswith("vllm: 5 started, budget 3")
    assert "test_3" in line and "test_4" in line and "test_0" not in line and "test_2" not in line


def test_each_kind_has_its_own_budget() -> None:
    # Catches a budget summed over kinds: 2 + 2 events within budgets of 2 and 2.
    assert over_budget(_events(2) + _events(2, "stack"), {"vllm": 2, "stack": 2}) == []
    assert len(over_budget(_events(2) + _events(3, "stack"), {"vllm": 2, "stack": 2})) == 1


def test_the_report_sums_seconds_per_kind_and_model() -> None:
    lines: list[str] = []
    report(_events(2) + [Event("stack", "looplift up", None, "tests/e.py::t (call)")], {"vllm": 4, "stack": 1},
           lines.append)
    assert any(line.split()[:4] == ["vllm", "2", "2", "4"] for line in lines), lines
    assert any(line.split()[:4] == ["stack", "1", "-", "1"] for line in lines), lines
    assert any("looplift up  <- tests/e.py::t" in line for line in lines), lines
