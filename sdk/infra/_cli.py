"""How every looplift command line fails: `error: <message>` on stderr, one line, then a non-zero exit.

The `looplift`, `collector`, `trainer`, `sandbox` and `env` commands all end this way, so their failures
look alike and scripts can rely on the exit codes each documents (2 for bad input, 1 otherwise, unless a
command says more). Plain `print`, not rich: the SDK depends on neither rich nor typer, and markup would
swallow a message's `[section]` or `[extra]` names.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

_RED, _RESET = "\033[31m", "\033[0m"


def cli_fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: <message>` to stderr and exit with `code` (raises `SystemExit(code)`).

    For CLI commands: typer and click let `SystemExit` through as they do `typer.Exit`, and typer's
    `CliRunner` reports it as the exit code. The message is printed as given (no markup), unwrapped, so
    it stays one line in a log; only the `error:` prefix is red, and only on a terminal without
    `NO_COLOR` set. Say in the message what to do about it (which flag, which value, what to install)."""
    stream = sys.stderr  # looked up now: a test runner may have replaced it
    prefix = "error:"
    if stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb":
        prefix = f"{_RED}{prefix}{_RESET}"
    print(f"{prefix} {message}", file=stream, flush=True)
    raise SystemExit(code)
