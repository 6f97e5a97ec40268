"""Eval suites without a server: loading by import path or file, prompt suites and their checkers (run
through the real SDK loop with a scripted policy), building one from `collector export --holdout`
output, and `looplift.toml`. Bad input is one line that says what to fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sdk
from trainer import (ConfigError, SuiteError, job_config, load_config, load_suite, prompt_suite, schedule_config,
                     suite_from_holdout)
from trainer._config import parse_duration

BIN = Path(sys.executable).parent


def _score(suite: sdk.EvalSuite, replies: dict[str, list[str]]) -> dict[str, bool]:
    """Run the suite with a policy that answers each task's turns with `replies[task.id]` in order."""

    def policy(task: sdk.Task, messages: list[sdk.Message]) -> str:
        turn = sum(1 for m in messages if m.role == "assistant")
        return replies[task.id][turn]

    trajs = sdk.run(list(suite.tasks), suite.env_factory, verifier=suite.verifier, budget=suite.budget, policy=policy)
    return {t.task_id: bool(t.outcome and t.outcome.success) for t in trajs}


# ---- loading ---------------------------------------------------------------------------------------
def test_the_demo_suite_loads_by_import_path_and_carries_its_budget() -> None:
    suite = load_suite("envs:arithmetic_suite")
    assert len(suite.tasks) == 100 and suite.budget.max_steps == 4 and suite.sampling.max_tokens == 64
    assert all(t.id.startswith("arith:") for t in suite.tasks)


@pytest.mark.parametrize(("spec", "message"), [
    ("nosuchpkg.evals:suite", "cannot import module 'nosuchpkg.evals'"),
    ("envs:nosuch", "module 'envs' has no attribute 'nosuch'"),
    ("envs:held_out_tasks", "is a list, not an sdk.EvalSuite"),
    ("sandboxes", "is not an import path; write it as PKG.MODULE:ATTR"),
    ("missing-suite.jsonl", "no such file"),
    ("", "no eval suite given"),
])
def test_a_bad_eval_spec_says_what_to_fix(spec: str, message: str) -> None:
    with pytest.raises(SuiteError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_suite(spec)


def test_a_suite_with_no_tasks_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text(json.dumps({"suite": {"name": "e"}}) + "\n")
    with pytest.raises(SuiteError, match="has no tasks"):
        load_suite(str(tmp_path / "empty.jsonl"))
    (tmp_path / "emptysuite.py").write_text(
        "import sdk\nfrom trainer import ScriptedPromptEnv, CheckerVerifier\n"
        "def suite():\n    return sdk.EvalSuite('e', [], ScriptedPromptEnv, CheckerVerifier())\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(SuiteError, match="emptysuite:suite: building the suite failed: .*no tasks"):
            load_suite("emptysuite:suite")
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.slow
def test_cli_eval_errors_are_one_line(tmp_path: Path) -> None:
    env = {"PATH": str(BIN), "LOOPLIFT_HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run([str(BIN / "trainer"), "suite", "check", "myapp.evals:suite"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().startswith("error:") and len(p.stderr.strip().splitlines()) == 1
    assert "cannot import module 'myapp.evals'" in p.stderr


# ---- prompt suites and checkers ---------------------------------------------------------------------
def test_exact_checker_single_and_multi_turn() -> None:
    suite = prompt_suite([{"id": "a", "turns": ["hi"], "expected": "hello"},
                          {"id": "b", "turns": ["step 1", "step 2"], "expected": "done", "slice": "multi"}])
    assert suite.budget.max_steps == 2 and suite.tasks[1].data["slice"] == "multi"
    assert _score(suite, {"a": [" hello\n"], "b": ["ok", "done"]}) == {"a": True, "b": True}
    assert _score(suite, {"a": ["hello!"], "b": ["done", "nope"]}) == {"a": False, "b": False}


def test_regex_checker_compares_the_captured_group() -> None:
    suite = prompt_suite([{"id": "a", "turns": ["7*6?"], "expected": "Answer: 42"}], checker=r"regex:Answer:\s*(\d+)")
    assert _score(suite, {"a": ["I think... Answer: 42"]}) == {"a": True}
    assert _score(suite, {"a": ["Answer: 41"]}) == {"a": False}
    anchored = prompt_suite([{"id": "a", "turns": ["json please"]}], checker=r"regex:^\{.*\}$")
    assert _score(anchored, {"a": ['{"x": 1}']}) == {"a": True}


def test_json_field_checker_tolerates_fences_and_compares_the_field() -> None:
    suite = prompt_suite([{"id": "a", "turns": ["extract"], "expected": '{"total": 12.5, "items": [{"sku": "A1"}]}'}],
                         checker="json:items.0.sku")
    assert _score(suite, {"a": ['Here:\n```json\n{"items": [{"sku": "A1"}], "total": 3}\n```']}) == {"a": True}
    assert _score(suite, {"a": ['{"items": [{"sku": "B2"}]}']}) == {"a": False}
    assert _score(suite, {"a": ["not json"]}) == {"a": False}


def test_function_checker_by_import_path(tmp_path: Path) -> None:
    (tmp_path / "mychecks.py").write_text("def close(reply, expected):\n"
                                          "    return abs(float(reply) - float(expected)) < 0.1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        suite = prompt_suite([{"id": "a", "turns": ["pi?"], "expected": "3.14"}], checker="mychecks:close")
        assert _score(suite, {"a": ["3.1"]}) == {"a": True}
        assert _score(suite, {"a": ["3.3"]}) == {"a": False}
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(("checker", "message"), [
    ("regex:(", "does not compile"), ("json:", "needs a field"), ("fuzzy", "unknown checker 'fuzzy'"),
    ("nosuchmod:fn", "cannot import module 'nosuchmod'"),
])
def test_bad_checkers_are_refused_when_the_suite_is_built(checker: str, message: str) -> None:
    with pytest.raises(SuiteError, match=message):
        prompt_suite([{"id": "a", "turns": ["x"], "expected": "y"}], checker=checker)


def test_a_crashing_checker_is_recorded_as_an_error_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / "badcheck.py").write_text("def boom(reply, expected):\n    raise RuntimeError('bug')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        suite = prompt_suite([{"id": "a", "turns": ["x"], "expected": "y"}], checker="badcheck:boom")
        [traj] = sdk.run(list(suite.tasks), suite.env_factory, verifier=suite.verifier, budget=suite.budget,
                         policy=lambda task, msgs: "y")
    finally:
        sys.path.remove(str(tmp_path))
    assert traj.outcome is not None and not traj.outcome.success and "RuntimeError: bug" in (traj.outcome.error or "")


# ---- from holdout -------------------------------------------------------------------------------------------
def _rec(rid: str, task: str, app: str, reward: float | None, score: float, *turns: str,
         corrected: bool = False) -> dict[str, object]:
    """An SFT export line: system prompt, then alternating user/assistant `turns`."""
    msgs = [{"role": "system", "content": "Be brief."}]
    msgs += [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return {"id": rid, "task_id": task, "app": app, "reward": reward, "score": score, "corrected": corrected,
            "messages": msgs}


def _holdout(tmp_path: Path) -> Path:
    rows = [
        _rec("1", "t1", "shop", 1.0, 1.0, "Order status of 42?", '{"status": "shipped"}'),
        _rec("2", "t2", "shop", 0.0, 0.0, "Refund?", "no"),
        _rec("3", "t3", "help", None, 0.9, "Open hours?", '{"status": "9-5"}', "Sunday?", '{"status": "closed"}'),
        _rec("4", "t4", "shop", 0.0, 1.0, "Track 7?", '{"status": "lost"}', corrected=True),
        _rec("5", "t1", "shop", 1.0, 1.0, "Order status of 42?", '{"status": "shipped"}'),
    ]
    path = tmp_path / "data.holdout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "data.manifest.json").write_text(json.dumps({"holdout": {"fraction": 0.2}}))
    return path


def test_suite_from_holdout_keeps_verified_answers(tmp_path: Path) -> None:
    built = suite_from_holdout(_holdout(tmp_path), checker="json:status", min_score=0.8)
    assert [c["id"] for c in built.cases] == ["t1", "t3", "t4"]
    assert built.skipped == {"not verified": 1, "duplicate prompt": 1}
    multi = built.cases[1]
    assert multi["turns"] == ["Open hours?", "Sunday?"] and multi["expected"] == '{"status": "closed"}'
    assert multi["slice"] == "help"
    assert built.header["system_prompt"] == "Be brief." and built.header["holdout"] == 0.2
    out = tmp_path / "suite.jsonl"
    built.write(out)
    suite = load_suite(str(out))
    assert suite.system_prompt == "Be brief." and len(suite.tasks) == 3
    assert _score(suite, {"t1": ['{"status": "shipped"}'], "t3": ["x", '{"status": "closed"}'],
                          "t4": ['{"status": "found"}']}) == {"t1": True, "t3": True, "t4": False}


@pytest.mark.slow
def test_from_holdout_cli_writes_the_suite_and_reports(tmp_path: Path) -> None:
    env = {"PATH": str(BIN), "LOOPLIFT_HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run([str(BIN / "trainer"), "suite", "from-holdout", str(_holdout(tmp_path)), "--checker", "exact",
                        "--out", str(tmp_path / "s.jsonl"), "--json"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["tasks"] == 2 and summary["holdout"] == 0.2 and summary["skipped"]["not verified"] == 2
    bad = subprocess.run([str(BIN / "trainer"), "suite", "from-holdout", str(tmp_path / "none.jsonl"), "--out",
                          str(tmp_path / "x.jsonl")], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


# ---- looplift.toml ---------------------------------------------------------------------------------------
def test_config_file_values_flags_win_and_paths_are_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "looplift.toml").write_text(
        '[trainer]\neval = "suite.jsonl"\napp = "shop"\nmin_examples = 3\nruns_dir = "runs"\n'
        '[gate]\nalpha = 0.01\n[schedule]\ncron = "0 3 * * *"\nnew_data = 100\ndrift_window = "6h"\n'
        '[sft]\nsteps = 50\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPLIFT_CONFIG", raising=False)
    cfg = load_config()
    assert cfg.path == tmp_path / "looplift.toml"
    job = job_config(cfg, app="other")
    assert job.eval == str(tmp_path / "suite.jsonl") and job.app == "other" and job.min_examples == 3
    assert job.runs_dir == tmp_path / "runs" and job.gate.alpha == 0.01 and job.sft.steps == 50
    sched = schedule_config(cfg, new_data=5)
    assert sched.cron == "0 3 * * *" and sched.new_data == 5 and sched.drift_window_s == 6 * 3600


@pytest.mark.parametrize(("text", "message"), [
    ('[trainer]\nevals = "x:y"\n', r"unknown key\(s\) \[trainer\].evals"),
    ('[trainr]\neval = "x:y"\n', r"unknown key\(s\) \[trainr\]"),
    ('[gate]\nalpha = "high"\n', r"\[gate\].alpha must be int or float, not str"),
    ("[trainer\n", "not valid TOML"),
    ("[gate]\nalpha = 2.0\n", "alpha must be in"),
])
def test_bad_config_is_one_error_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        job_config(load_config(tmp_path / "c.toml"))


@pytest.mark.parametrize(("value", "seconds"), [(30, 30.0), ("45s", 45.0), ("30m", 1800.0), ("24h", 86400.0),
                                                ("2d", 172800.0)])
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value, "poll") == seconds


def test_bad_duration_and_bad_cron_say_how_to_write_them() -> None:
    with pytest.raises(ConfigError, match="write it like 45s"):
        parse_duration("soon", "poll")
    from trainer import LoopliftConfig

    with pytest.raises(ConfigError, match=r"cron expression 'every day' does not parse; write 5 fields"):
        schedule_config(LoopliftConfig(), cron="every day")
    with pytest.raises(ConfigError, match="no trigger"):
        schedule_config(LoopliftConfig())
