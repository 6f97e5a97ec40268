"""`looplift sandbox …`: build the sandbox image, run one command in a sandbox, show the backend choice.

A typer `app` the looplift CLI mounts as `looplift sandbox`; also runnable as
`python -m sandboxes.cli` (scripts/setup_docker.sh does). Errors print a message, never a
traceback. `exec` exits with the command's own exit code, 124 when it timed out, 2 on bad input and
125 when the sandbox machinery failed (Docker's convention for "the engine, not the command").
This module only parses flags and prints; the work happens in the package.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from sdk.infra import cli_fail

from . import _defaults
from ._config import SandboxConfig
from ._factory import choose_backend, make_sandbox
from ._image import build_image
from ._local import local_isolation
from .errors import SandboxError

app = typer.Typer(help="Isolated execution of model-written code.", no_args_is_help=True, add_completion=False)
_out = Console()
_err = Console(stderr=True)

EXIT_TIMEOUT = 124
EXIT_BAD_INPUT = 2
EXIT_SANDBOX_ERROR = 125


@app.command("build-image")
def build_image_cmd(
    tag: Optional[str] = typer.Option(None, "--tag", help=f"Image tag to build (default {_defaults.IMAGE}, with --3d "
                                                 f"{_defaults.IMAGE_3D})."),
    three_d: bool = typer.Option(False, "--3d", help="Build the 3D image: the base image plus Blender as the `bpy` "
                                                    "module (the modeling task family runs in it; ~1.2 GB)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the tag exists."),
    pull: bool = typer.Option(True, "--pull/--no-pull", help=f"Try `docker pull {_defaults.PULL_IMAGE}` first "
                                                             "(base image only)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of progress."),
) -> None:
    """Build the sandbox image offline (debootstrap) unless it exists."""
    progress = None if as_json else (lambda line: _err.print(Text(line, style="dim")))
    flavor = "3d" if three_d else "base"
    tag = tag or (_defaults.IMAGE_3D if three_d else _defaults.IMAGE)
    try:
        how = build_image(tag, flavor=flavor, force=force, progress=progress, pull=pull)
    except SandboxError as e:
        cli_fail(str(e), 1)
    if as_json:
        _out.print_json(json.dumps({"tag": tag, "how": how}))
    else:
        _out.print(f"image [bold]{tag}[/]: {how}")


@app.command(
    "exec",
    context_settings={"allow_interspersed_args": False},
)
def exec_cmd(
    cmd: list[str] = typer.Argument(..., help="Command and arguments, after `--`."),  # noqa: B008 - typer idiom
    backend: str = typer.Option("auto", "--backend", help="docker, local or auto."),
    timeout: float = typer.Option(_defaults.TIMEOUT_S, "--timeout", help="Seconds before the command is killed."),
    memory: int = typer.Option(_defaults.MEMORY_MB, "--memory", help="Memory limit in MiB."),
    image: str = typer.Option(_defaults.IMAGE, "--image", help="Docker image (docker backend)."),
    stdin: bool = typer.Option(False, "--stdin", help="Feed this process's standard input to the command."),
    as_json: bool = typer.Option(False, "--json", help="Print the ExecResult as one JSON object."),
) -> None:
    """Run one command in a fresh sandbox and print what it did."""
    if backend not in ("auto", "docker", "local"):
        cli_fail(f"--backend must be docker, local or auto, not {backend!r}", EXIT_BAD_INPUT)
    try:
        config = SandboxConfig(image=image, memory_mb=memory, timeout_s=timeout)
    except ValueError as e:
        cli_fail(str(e), EXIT_BAD_INPUT)
    data = sys.stdin.buffer.read() if stdin else None

    def live(stream: str, text: str) -> None:  # plain mode: output appears as the command writes it
        target = sys.stdout if stream == "stdout" else sys.stderr
        target.write(text)
        target.flush()

    try:
        with make_sandbox(backend, config) as sb:
            result = sb.exec(cmd, stdin=data, on_output=None if as_json else live)
            used = sb.backend
    except SandboxError as e:
        cli_fail(str(e), EXIT_SANDBOX_ERROR)
    except ValueError as e:
        cli_fail(str(e), EXIT_BAD_INPUT)
    if as_json:
        print(json.dumps({**result.to_dict(), "backend": used}))
    else:
        flags = [name for name, on in (("timed out", result.timed_out), ("OOM-killed", result.oom_killed),
                                        ("stdout truncated", result.stdout_truncated),
                                        ("stderr truncated", result.stderr_truncated)) if on]
        _err.print(
            f"[dim]{used}: exit {result.exit_code} in {result.duration_s * 1000:.0f} ms"
            f"{' (' + ', '.join(flags) + ')' if flags else ''}[/]",
            highlight=False,
        )
    if result.timed_out:
        raise typer.Exit(EXIT_TIMEOUT)
    raise typer.Exit(result.exit_code if result.exit_code is not None else 1)


@app.command("info")
def info_cmd(
    image: str = typer.Option(_defaults.IMAGE, "--image", help="Docker image to look for."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show which backend would be picked, and why, and what the local fallback isolates."""
    choice = choose_backend(None, image)
    iso = local_isolation()
    info = {
        "backend": choice.backend,
        "reason": choice.reason,
        "image": image,
        "local_isolation": iso.describe(),
        "local_network_isolated": iso.network_isolated,
    }
    if as_json:
        print(json.dumps(info))
        return
    _out.print(f"backend: [bold]{choice.backend}[/] — {choice.reason}", highlight=False)
    _out.print(f"local fallback: {iso.describe()}", highlight=False)


def main() -> None:
    """Entry point for `python -m sandboxes.cli`."""
    app()


if __name__ == "__main__":
    main()
