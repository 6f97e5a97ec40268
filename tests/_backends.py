"""Sandbox backends for parametrized tests: local always, Docker when an engine with the image answers
(otherwise those cases are reported as skipped, with the reason)."""

from __future__ import annotations

import pytest

from sandboxes import choose_backend


def _docker_reason() -> str | None:
    choice = choose_backend(None)
    return None if choice.backend == "docker" else choice.reason


DOCKER_SKIP = _docker_reason()
needs_docker = pytest.mark.skipif(DOCKER_SKIP is not None, reason=f"no Docker sandbox: {DOCKER_SKIP}")
BACKENDS = ["local", pytest.param("docker", marks=[pytest.mark.docker, needs_docker])]
