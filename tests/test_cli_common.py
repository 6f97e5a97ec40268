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
from sdk.infra import cli_fail, import_object


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
