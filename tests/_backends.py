"""Sandbox backends for parametrized tests: local always, Docker when an engine with the image answers.
Without one the Docker cases are reported as skipped with the reason, except under CI (`CI` set), where
they fail: CI must test the real engine, and a silently skipped backend is how a container bug ships."""

from __future__ import annotations

import os

import pytest

from sandboxes import choose_backend


def _docker_reason() -> str | None:
    choice = choose_backend(None)
    return None if choice.backend == "docker" else choice.reason


DOCKER_SKIP = _docker_reason()


def _fail_without_docker() -> None:
    pytest.fail(f"CI is set but no Docker sandbox answers ({DOCKER_SKIP}): .ci/run must start dockerd and build "
                "the image (scripts/setup_docker.sh)")


if DOCKER_SKIP is not None and os.environ.get("CI"):
    # A mark cannot fail a test, a fixture can: every Docker case fails at setup with the reason.
    needs_docker = pytest.mark.usefixtures("fail_without_docker")
else:
    needs_docker = pytest.mark.skipif(DOCKER_SKIP is not None, reason=f"no Docker sandbox: {DOCKER_SKIP}")
BACKENDS = ["local", pytest.param("docker", marks=[pytest.mark.docker, needs_docker])]


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
