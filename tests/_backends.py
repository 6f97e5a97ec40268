"""Sandbox backends for parametrized tests: local always, Docker when an engine with the image answers.
The Docker case is marked `docker`: without an engine it is reported as skipped with the reason, except under
CI (`CI` set), where it fails (tests/_resources.py): CI must test the real engine, and a silently skipped
backend is how a container bug ships. Nothing here probes Docker at import: only a test that runs the
Docker case does (conftest's setup hook), so the fast tier (`-m "not docker ..."`) never touches the engine."""

from __future__ import annotations

import pytest

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def sandbox_processes(sb, marker: str) -> list[str]:  # noqa: ANN001 - any Sandbox
    """`"STATE CMDLINE"` of every process the sandbox can see (its pid namespace) whose command
    line contains `marker`; the listing script itself is left out."""
    code = (
        "import os  # ll-proc-list\n"
        "for p in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        cmd = open(f'/proc/{p}/cmdline','rb').read().replace(b'\\0', b' ').decode()\n"
        "        state = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0]\n"
        "    except OSError:\n"
        "        continue\n"
        "    print(state, cmd)\n"
    )
    r = sb.run_python(code)
    assert r.ok, r
    return [line for line in r.stdout.splitlines() if marker in line and "ll-proc-list" not in line]
