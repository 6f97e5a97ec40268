"""Shared fixtures. The vLLM/model fixtures below (prefix `looplift_` / `vllm_`) are session-scoped:
one tiny model, a few LoRA adapters, and ONE real vLLM CPU server (~40 s, ~3 GB) for the whole run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from _dbs import DIALECTS, database


# ---- vLLM / model fixtures (owned by the server package's tests) ------------------------------
@pytest.fixture(scope="session")
def looplift_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained tiny Llama (hidden 128, head_dim 64, byte-level BPE, chat template) vLLM CPU loads."""
    from trainer._base_model import write_untrained

    return write_untrained(tmp_path_factory.mktemp("looplift_model") / "model", seed=0)


@pytest.fixture(scope="session")
def looplift_lora_sources(looplift_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two rank-8 peft LoRA adapters with different non-zero weights for the tiny model."""
    from trainer._base_model import write_lora_adapter

    root = tmp_path_factory.mktemp("looplift_lora_src")
    return [write_lora_adapter(looplift_model_dir, root / f"seed{s}", seed=s, rank=8) for s in (1, 2)]


@pytest.fixture(scope="session")
def looplift_new_adapter(
    looplift_lora_sources: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[int], Path]:
    """`new_adapter(i)` copies source adapter `i % 2` to a fresh directory. Every loaded version gets
    its own path, as real published versions do (vLLM warns when a path is reused with new weights)."""
    root = tmp_path_factory.mktemp("looplift_lora")
    counter = iter(range(10_000))

    def new_adapter(i: int = 0) -> Path:
        dst = root / f"adapter-{next(counter)}"
        shutil.copytree(looplift_lora_sources[i % len(looplift_lora_sources)], dst)
        return dst

    return new_adapter


@pytest.fixture(scope="session")
def looplift_base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real tiny base model `looplift up`/`demo` build by default (~4 CPU-minutes here), built once per
    session. Tests that need a policy that solves some tasks (a demo that reaches a swap) use it through
    `looplift_home_with_base_model` instead of building it again."""
    from trainer import BaseModelConfig, build_base_model

    return build_base_model(BaseModelConfig(), out_dir=tmp_path_factory.mktemp("looplift_base_model") / "model")


@pytest.fixture(scope="session")
def looplift_home_with_base_model(looplift_base_model: Path) -> Callable[[Path], Path]:
    """`seed(home)` copies the session's base model into `home`'s base-model cache (where `looplift up` and
    `looplift demo` look first) and returns `home`."""
    from trainer import base_model_dir

    def seed(home: Path) -> Path:
        with pytest.MonkeyPatch.context() as m:
            m.setenv("LOOPLIFT_HOME", str(home))
            shutil.copytree(looplift_base_model, base_model_dir())
        return home

    return seed


@pytest.fixture(scope="session")
def vllm_server(looplift_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real vLLM CPU server for the session, serving the tiny model as `policy-v0` with runtime LoRA."""
    from _vllm import start_warm_vllm

    server = start_warm_vllm(looplift_model_dir, tmp_path_factory.mktemp("vllm_logs") / "vllm.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gateway(vllm_server: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """A gateway in a thread over the session's vLLM, with its own state dir; admin token: the test module's
    `ADMIN`."""
    from server import GatewaySettings, start_gateway_in_thread

    settings = GatewaySettings(admin_token=request.module.ADMIN, state_dir=tmp_path / "state")
    with start_gateway_in_thread(settings, vllm_server.url, port=0) as gw:
        yield gw


@pytest.fixture(params=DIALECTS)
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh collector database URL, once per dialect (SQLite always; Postgres skips locally without
    LOOPLIFT_TEST_POSTGRES_URL and fails under CI)."""
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty Postgres schema (see `any_db_url` for when it skips or fails)."""
    with database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def fail_without_docker() -> None:
    """Used by `_backends.needs_docker` under CI when no Docker sandbox answers: fails with the reason."""
    from _backends import _fail_without_docker

    _fail_without_docker()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite collector database in the test's tmp dir."""
    return f"sqlite:///{tmp_path / 'collector.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[object]:
    """An open (migrated) collector `Store` on `db_url`, closed after the test."""
    from collector import open_store

    s = open_store(db_url)
    yield s
    s.close()
