"""What the tests need from the machine beyond Python, and the one rule for when it is missing.

Each resource is a pytest marker (registered in pyproject.toml, `--strict-markers`):

    docker    a Docker engine that answers, with the base sandbox image (scripts/setup_docker.sh)
    image3d   the 3D sandbox image (Blender) on that engine; implies `docker`
    vllm      the vllm package: the test starts a real vLLM CPU server
    postgres  a PostgreSQL server named by $LOOPLIFT_TEST_POSTGRES_URL (scripts/setup_postgres.sh)
    chromium  a `chromium` binary on PATH (apt-get install chromium)

Two more markers select tests without naming a resource: `model_build` (builds or trains a model: the tiny
base model, an SFT/DPO/GRPO run) and `slow` (seconds rather than milliseconds: a subprocess that imports the
stack, a server, large data; found with `--durations`). `make test-fast` deselects all seven.

A test gets a resource marker by hand, through the marks of a parameter (`BACKENDS`, `DIALECTS`), or from a
fixture it uses: `@needs("vllm")` under `@pytest.fixture` marks every test whose fixture closure holds that
fixture (conftest's `pytest_collection_modifyitems`), so a new test cannot forget it. Before a marked test
runs, conftest calls `require(resource)`: when the resource is missing the test is skipped with the reason,
except under CI (`CI` set), where it fails: CI must test the real thing, and a silently skipped backend is how
a container bug ships. Probes run once per session and only for tests that carry the marker, so the fast
tier never touches Docker, Postgres, Chromium or vLLM.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
from typing import Callable, TypeVar

import pytest

RESOURCES = ("docker", "image3d", "vllm", "postgres", "chromium")
# Markers that need no probe: they only select (deselected by `make test-fast`).
SELECTORS = ("model_build", "slow")
PG_ENV = "LOOPLIFT_TEST_POSTGRES_URL"

_HOW = {
    "docker": "scripts/setup_docker.sh starts dockerd and builds the sandbox images",
    "image3d": "`looplift sandbox build-image --3d` (or scripts/setup_docker.sh) builds it",
    "vllm": "pip install -e '.[cpu]' (or '.[gpu]')",
    "postgres": f"scripts/setup_postgres.sh starts one; export {PG_ENV}=postgresql+psycopg://USER@127.0.0.1:PORT/DB",
    "chromium": "apt-get install -y chromium",
}

F = TypeVar("F", bound=Callable[..., object])


def in_ci() -> bool:
    """True when `CI` is set to anything but empty/0/false (GitHub, GitLab and .ci/run set CI=true)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def needs(*resources: str) -> Callable[[F], F]:
    """Put under `@pytest.fixture`: every test using the fixture gets these markers (see the module doc)."""
    unknown = set(resources) - set(RESOURCES) - set(SELECTORS)
    if unknown:
        raise ValueError(f"unknown resource marker(s) {sorted(unknown)}; known: {RESOURCES + SELECTORS}")

    def mark(fn: F) -> F:
        fn.looplift_needs = tuple(resources)  # type: ignore[attr-defined]
        return fn

    return mark


@functools.cache
def missing(resource: str) -> str | None:
    """Why `resource` is not available here, or None when it is (probed once per session)."""
    if resource == "docker":
        from sandboxes import choose_backend

        choice = choose_backend(None)
        return None if choice.backend == "docker" else choice.reason
    if resource == "image3d":
        from sandboxes import choose_backend
        from sandboxes._defaults import IMAGE_3D

        choice = choose_backend(None, IMAGE_3D)
        return None if choice.backend == "docker" else choice.reason
    if resource == "vllm":
        return None if importlib.util.find_spec("vllm") is not None else "the vllm package is not installed"
    if resource == "postgres":
        return None if os.environ.get(PG_ENV, "").strip() else f"{PG_ENV} is not set"
    if resource == "chromium":
        return None if shutil.which("chromium") or shutil.which("chromium-browser") else "no chromium on PATH"
    raise ValueError(f"unknown resource {resource!r}; known: {', '.join(RESOURCES)}")


def require(resource: str, why: str | None = None) -> None:
    """Return when `resource` is available; else skip the running test (locally) or fail it (under CI).

    `why` is the caller's own finding (e.g. a second dockerd that did not start); None probes `missing`."""
    why = why if why is not None else missing(resource)
    if why is None:
        return
    if in_ci():
        pytest.fail(f"CI is set but {resource} is missing: {why}. .ci/run must provide it: {_HOW[resource]}", pytrace=False)
    pytest.skip(f"no {resource}: {why}. To run it: {_HOW[resource]}")
