"""What every command line shares: one way to fail (`sdk.infra.cli_fail`), one `PKG.MODULE:ATTR` loader
(`sdk.infra.import_object`), the packages' public `cli` modules the `looplift` command mounts, and the
demo's `--algo online-grpo`, named apart from `trainer run --algo grpo`. No model, no server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sdk.errors import ConfigError
from sdk.infra import TiedProcess, cli_fail, import_object


# ---- cli_fail ------------------------------------------------------------------------------------
def test_cli_fail_prints_one_plain_line_and_exits_with_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_fail("needs the [trainer] extra; see [section] in looplift.toml", 2)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: needs the [trainer] extra; see [section] in looplift.toml\n"  # no markup eaten


def test_a_typer_command_that_fails_exits_with_its_code_and_no_traceback() -> None:
    app = typer.Typer()

    @app.command()
    def go(code: int = 3) -> None:
        cli_fail("bad input: pass --code", code)

    @app.command()
    def other() -> None:
        pass

    res = CliRunner().invoke(app, ["go", "--code", "7"])
    assert res.exit_code == 7 and "error: bad input: pass --code" in res.output and "Traceback" not in res.output


# ---- import_object -------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "message"), [
    ("sdk.infra", "is not an import path; write it as PKG.MODULE:ATTR"),
    (":x", "is not an import path"),
    ("nosuchpkg.evals:suite", "cannot import module 'nosuchpkg.evals'"),
    ("sdk:nosuch", "module 'sdk' has no attribute 'nosuch'"),
    ("sdk:Budget.nosuch", "module 'sdk' has no attribute 'Budget.nosuch'"),
])
def test_import_object_errors_say_what_to_fix(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        import_object(spec, what="--eval")
    assert str(e.value).startswith(f"--eval {spec!r}")


def test_import_object_resolves_dotted_attributes_and_maps_the_error_type() -> None:
    assert import_object("sdk:Budget.__name__") == "Budget"

    class MyError(Exception):
        pass

    with pytest.raises(MyError, match="checker 'nosuch:f': cannot import module 'nosuch'"):
        import_object("nosuch:f", what="checker", error=MyError)


def test_a_module_whose_own_import_fails_is_not_called_missing(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_xyz\nf = 1\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('bad config')\n")
    monkeypatch.chdir(tmp_path)  # found from the current directory, as `python -m` would
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ConfigError, match="importing 'needs_dep' failed: ModuleNotFoundError: No module named "
                                          "'no_such_dependency_xyz'"):
        import_object("needs_dep:f")
    with pytest.raises(ConfigError, match="importing 'raises' failed: RuntimeError: bad config"):
        import_object("raises:f")


def test_from_cwd_false_leaves_sys_path_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "only_here.py").write_text("f = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(ConfigError, match="cannot import module 'only_here'"):
        import_object("only_here:f", from_cwd=False)
    assert str(tmp_path) not in sys.path


# ---- the packages' public command lines -----------------------------------------------------------
@pytest.mark.slow
def test_each_package_has_a_public_cli_that_importing_the_package_does_not_load() -> None:
    code = ("import sys, server, collector, trainer, sandboxes\n"
            "packages = ('server', 'collector', 'trainer', 'sandboxes')\n"
            "print(any(m in sys.modules for p in packages for m in (p + '.cli', p + '._cli')))\n"
            "from typer.testing import CliRunner\nfrom looplift._cli import app\n"
            "r = CliRunner().invoke(app, ['--help'], env={'COLUMNS': '200'})\n"
            "print(r.exit_code, all(p + '.cli' in sys.modules for p in packages))\n"
            "import importlib\n"
            "print(all(callable(importlib.import_module(p + '.cli').main) for p in packages))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "0", "True", "True"]  # `looplift --help` mounted every public cli


def test_a_group_whose_extra_is_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from looplift import _cli

    def missing() -> typer.Typer:
        raise ImportError("No module named 'sqlalchemy'")

    monkeypatch.setitem(_cli.GROUPS, "collector", (missing, "collector", "Collector."))
    res = CliRunner().invoke(_cli.app, ["collector"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "`looplift collector` needs the [collector] extra: No module named 'sqlalchemy'" in res.output
    assert "pip install 'looplift[collector]'" in res.output


# ---- the demo's --algo ---------------------------------------------------------------------------
@pytest.mark.parametrize(("algo", "message"), [
    ("grpo", "the demo's online GRPO is `--algo online-grpo`"),
    ("dpo", "--algo must be sft or online-grpo, not 'dpo'"),
])
def test_the_demo_refuses_an_algo_it_does_not_run_before_starting_anything(algo: str, message: str) -> None:
    from looplift._cli import app

    res = CliRunner().invoke(app, ["demo", "--algo", algo])
    assert res.exit_code == 2 and message in " ".join(res.output.split()) and "Traceback" not in res.output


def test_a_port_left_in_time_wait_is_free_and_a_listening_one_is_not() -> None:
    """`looplift up`'s port check (`_port_free`). Broken variant: a bind without SO_REUSEADDR, which counts a
    stopped server's TIME_WAIT connections as "already in use" and refuses a restart for about a minute."""
    import socket

    from looplift._cli import _port_free

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not _port_free("127.0.0.1", port)  # something listens there
        with socket.create_connection(("127.0.0.1", port)) as client:
            served, _ = listener.accept()
            served.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
            client.recv(1)
    with socket.socket() as plain:  # the TIME_WAIT is there: a bind without SO_REUSEADDR is refused
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert _port_free("127.0.0.1", port)


def test_up_reports_the_tool_call_parser_vllm_was_given_in_either_spelling() -> None:
    """Broken variant: only `--tool-call-parser V` read, so an `--tool-call-parser=V` in extra args showed the
    detected parser (or none) in `looplift up`'s summary instead of the one vLLM runs."""
    from looplift._cli import _parser_in

    assert _parser_in(["-m", "vllm", "--tool-call-parser", "hermes"]) == "hermes"
    assert _parser_in(["--tool-call-parser", "hermes", "--tool-call-parser=mistral"]) == "mistral"
    assert _parser_in(["--model", "m"]) is None


# ---- looplift up: a vLLM that exited -------------------------------------------------------------
def _vllm_like(log: Path, last_words: str) -> TiedProcess:
    """A real process, tied as `looplift up` ties vLLM, that logs a start-up warning in exception form (as vLLM
    does), then `last_words`, and waits."""
    import time

    from sdk.infra import spawn_tied

    code = ("import sys, time\nprint('INFO vLLM API server version 0.x')\n"
            "print('ValueError: the tokenizer has no chat template; a default one is used')\n"
            f"print({last_words!r}, flush=True)\ntime.sleep(120)\n")
    with log.open("wb") as f:
        proc = spawn_tied([sys.executable, "-u", "-c", code], grace_s=1, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while last_words.encode() not in log.read_bytes():
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.05)
    return proc


def test_up_says_a_sigkilled_vllm_was_killed_not_a_cause_from_its_log(tmp_path: Path) -> None:
    """Broken variant: the SIGKILL (the OOM killer, an operator) reported as "vLLM exited with code -9" with the log's
    last exception line as the cause ("ValueError: the tokenizer has no chat template ..."), a start-up warning
    that had nothing to do with it."""
    import os
    import signal

    from looplift._cli import _vllm_exited

    log = tmp_path / "vllm.log"
    proc = _vllm_like(log, "INFO Loading safetensors checkpoint shards: 100%")
    os.kill(proc.pid, signal.SIGKILL)  # the vLLM process, not its guardian: what the OOM killer picks
    assert proc.wait(30) == -signal.SIGKILL
    line = _vllm_exited(proc.returncode, log.read_text(), log)
    assert line.startswith("vLLM was killed (SIGKILL: out of memory, or killed by another process)"), line
    assert f"(log: {log})" in line and "ValueError" not in line and "code -9" not in line


def test_up_gives_the_code_and_the_log_cause_of_a_vllm_that_exited_by_itself(tmp_path: Path) -> None:
    """The other side of the SIGKILL case. Broken variant: every death called "killed" (or the cause dropped), so an
    exit vLLM explained in its log (here a CUDA out-of-memory error, exit code 1) lost its reason."""
    import signal

    from looplift._cli import _vllm_exited

    log = tmp_path / "vllm.log"
    tail = "INFO loading\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    log.write_text(tail)
    line = _vllm_exited(1, tail, log)
    assert line == (f"vLLM exited with code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                    f"(log: {log})")
    assert "killed" not in _vllm_exited(-signal.SIGTERM, tail, log)


def test_up_says_a_vllm_killed_while_starting_was_killed(tmp_path: Path) -> None:
    """Broken variant: a vLLM SIGKILLed while loading its weights (the usual moment for the OOM killer) reported by
    the log's last exception line ("vLLM did not start: ... ValueError ..."), a start-up warning unrelated to it."""
    import os
    import signal

    from looplift._cli import _one_line
    from server import VLLMStartError

    log = tmp_path / "vllm.log"
    proc = _vllm_like(log, "INFO Loading safetensors checkpoint shards: 40%")
    os.kill(proc.pid, signal.SIGKILL)
    code = proc.wait(30)
    err = VLLMStartError(f"the process exited with code {code} after 12.0 s", command=["vllm"], log_path=log,
                         log_tail=log.read_text(), returncode=code)
    line = _one_line(err)
    assert line.startswith("vLLM did not start: vLLM was killed (SIGKILL"), line
    assert "ValueError" not in line and f"(log: {log})" in line
    exited = VLLMStartError("the process exited with code 1 after 3.0 s", command=["vllm"], log_path=log,
                            log_tail="ValueError: bad --max-model-len\n", returncode=1)
    assert _one_line(exited) == (f"vLLM did not start: the process exited with code 1 after 3.0 s: ValueError: bad "
                                 f"--max-model-len (log: {log})")
