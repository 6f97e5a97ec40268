"""Shared fixtures. The vLLM/model fixtures below (prefix `looplift_` / `vllm_`) are session-scoped:
one tiny model, a few LoRA adapters, and ONE real vLLM CPU server (~40 s, ~3 GB) for the whole run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from _cost import BUDGET, over_budget, read_ledger, report
from _dbs import DIALECTS, database
from _resources import RESOURCES, needs, require

from sdk.infra import COST_LOG_ENV, COST_TAG_ENV


# ---- the session's own LOOPLIFT_HOME, resource markers (tests/_resources.py) ---------------------
_HOME = pytest.StashKey["str | None"]()  # the caller's LOOPLIFT_HOME, put back at the end
_LEDGER = pytest.StashKey[Path]()  # the session's cost ledger (tests/_cost.py)
_OVER = pytest.StashKey["list[str]"]()  # what exceeded the budget, for the summary


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin is configured
def pytest_configure(config: pytest.Config) -> None:
    """Give the session its own LOOPLIFT_HOME before anything is imported or collected: tests never write to
    ~/.looplift (or to a LOOPLIFT_HOME the caller set), and costly caches under it (the name model, ~10-40 s
    to train) are built once per session and shared by every test that does not set a home of its own. It
    lives in the session's pytest temp dir, which pytest rotates (even after a killed run)."""
    factory = getattr(config, "_tmp_path_factory", None)
    home = factory.mktemp("looplift_home", numbered=False) if factory else Path(tempfile.mkdtemp(prefix="looplift-home-"))
    config.stash[_HOME] = os.environ.get("LOOPLIFT_HOME")
    os.environ["LOOPLIFT_HOME"] = str(home)
    # The cost ledger: every process of the run (children inherit the variable) appends what it started. Under
    # pytest-xdist the controller makes it and its workers (which inherit the variable) write to it; only the
    # controller reads it at the end.
    if _xdist_worker():
        _share_the_cores()
        return
    ledger = home.parent / "cost.jsonl"
    ledger.unlink(missing_ok=True)
    config.stash[_LEDGER] = ledger
    os.environ[COST_LOG_ENV] = str(ledger)


def _xdist_worker() -> bool:
    """True in a pytest-xdist worker (`make test` runs two): it uses the controller's ledger."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER")) and bool(os.environ.get(COST_LOG_ENV))


def _share_the_cores() -> None:
    """Give this pytest-xdist worker, and every process it starts, its share of the machine's cores for torch (in
    the worker, in model builds, trainer runs and demos): one thread per share (`OMP_NUM_THREADS`). Two workers
    whose torch each ran on every core waited on each other: two 150-step base builds side by side took 155 s on
    the default threads and 84 s on one thread each (one alone: 67 s). vLLM keeps its own binding (every core):
    pinned to the worker's one core, blue/green's second server, started beside the first under load, was not
    healthy after 240 s (a measured run: the test took 542 s instead of 176)."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if count < 2 or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    threads = str(max(1, len(os.sched_getaffinity(0)) // count))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _HOME not in config.stash:
        return
    if _LEDGER in config.stash:
        os.environ.pop(COST_LOG_ENV, None)
    before = config.stash[_HOME]
    if before is None:
        os.environ.pop("LOOPLIFT_HOME", None)
    else:
        os.environ["LOOPLIFT_HOME"] = before


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Charge what the test (its setup, call and teardown, and every child they start) records to its id."""
    os.environ[COST_TAG_ENV] = item.nodeid
    try:
        return (yield)
    finally:
        os.environ.pop(COST_TAG_ENV, None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when it started more of a kind than `tests/_cost.py`'s BUDGET allows (a count, never a time)."""
    if _LEDGER not in session.config.stash:
        return
    over = over_budget(read_ledger(session.config.stash[_LEDGER]), BUDGET)
    session.config.stash[_OVER] = over
    if over and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The suite's own cost: what it started (vLLM servers, model builds, image builds, stacks), with seconds."""
    if _LEDGER not in config.stash:
        return
    events = read_ledger(config.stash[_LEDGER])
    terminalreporter.section("cost: what this run started (tests/_cost.py)")
    report(events, BUDGET, terminalreporter.write_line)
    for line in config.stash.get(_OVER, []):
        terminalreporter.write_line(f"OVER BUDGET: {line}", red=True, bold=True)


#: The modules that took longest in a measured run (docs/contributing.md), about longest first. `make test` hands
#: whole modules to its two workers in item order (`--dist loadfile --no-loadscope-reorder`, two modules each to
#: start with), so the long ones go first and the short ones fill the gaps at the end, instead of one long module
#: running alone after the rest. The modules that need the default model's build (e2e, lifetimes, soak: ~4 minutes,
#: once, the other worker waits on its lock) are not among the first four, except the one that builds it.
LONGEST_FIRST = ("test_e2e.py", "test_families_stack.py", "test_bluegreen.py", "test_replicas.py",
                 "test_lifetimes.py", "test_soak.py")
_COSTLY = ("vllm", "docker", "image3d", "model_build")


def _order_modules(items: list[pytest.Item]) -> None:
    """Order the modules for the workers: LONGEST_FIRST, then modules that start a costly resource, then slow ones,
    then the rest; a module's tests keep their order (a stable sort on the module's rank)."""
    rank: dict[str, tuple[int, int]] = {}
    for item in items:
        name = item.path.name
        marks = {m.name for m in item.iter_markers()}
        cls = 1 if marks & set(_COSTLY) else 2 if "slow" in marks else 3
        first = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        rank[name] = min(rank.get(name, (9, 9)), (0 if first < len(LONGEST_FIRST) else cls, first))
    items.sort(key=lambda item: rank[item.path.name])


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the markers added here count for it
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test whose fixture closure holds a `@needs(...)` fixture gets that fixture's markers; `image3d`
    implies `docker`. Then the modules are put in the order the workers should take them (`_order_modules`)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the fixtures the test resolves to
        names = set()
        for name in getattr(item, "fixturenames", ()):
            defs = info.name2fixturedefs.get(name, ()) if info is not None else ()
            if defs:
                names.update(getattr(defs[-1].func, "looplift_needs", ()))
        if item.get_closest_marker("image3d") is not None:
            names.add("docker")
        for name in sorted(names):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
    _order_modules(items)


@pytest.hookimpl(tryfirst=True)  # before any fixture starts the resource
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked with a resource skips (locally) or fails (under CI) when the resource is missing."""
    for resource in RESOURCES:
        if item.get_closest_marker(resource) is not None:
            require(resource)


# ---- vLLM / model fixtures (owned by the server package's tests) ------------------------------
@pytest.fixture(scope="session")
@needs("model_build")
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
@needs("model_build", "slow")
def looplift_base_model() -> Path:
    """The real tiny base model `looplift up`/`demo` build by default (a few CPU-minutes here), built once by
    `trainer build-base` in a child process and cached by content hash (tests/_models.py). Tests that need a policy
    that solves some tasks (a demo that reaches a swap) use it through `looplift_home_with_base_model`."""
    from _models import base_model

    return base_model()


@pytest.fixture(scope="session")
@needs("model_build")
def looplift_small_trained_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny base model trained briefly (300 demonstrations, 30 steps: ~20 s), for the trainer's own tests (SFT,
    training on several processes); built once per session."""
    from _models import SMALL_TRAINED_FIELDS

    from trainer._base_model import BaseModelConfig, build_base_model

    return build_base_model(BaseModelConfig(**SMALL_TRAINED_FIELDS), out_dir=tmp_path_factory.mktemp("small_trained") / "model")


@pytest.fixture(scope="session")
def looplift_home_with_base_model(looplift_base_model: Path, name_model_dir: Path) -> Callable[[Path], Path]:
    """`seed(home)` copies the session's base model into `home`'s base-model cache (where `looplift up` and
    `looplift demo` look first), links the session's name model into it (their collectors anonymize without
    training it again) and returns `home`."""
    from trainer import base_model_dir

    def seed(home: Path) -> Path:
        with pytest.MonkeyPatch.context() as m:
            m.setenv("LOOPLIFT_HOME", str(home))
            shutil.copytree(looplift_base_model, base_model_dir())
        (home / "models" / name_model_dir.name).symlink_to(name_model_dir, target_is_directory=True)
        return home

    return seed


@pytest.fixture(scope="session")
@needs("vllm")
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
    """A fresh collector database URL, once per dialect (SQLite always; the Postgres case is marked
    `postgres`: it skips locally without LOOPLIFT_TEST_POSTGRES_URL and fails under CI)."""
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
@needs("postgres")
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty Postgres schema (see `any_db_url` for when it skips or fails)."""
    with database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def name_model_dir() -> Path:
    """The session's trained name/address model (collector/_names.py), in the session's LOOPLIFT_HOME: trained
    by the first test that needs it (~10-40 s), then found there by every process that uses that home."""
    from collector import _names

    config = _names.NameModelConfig()
    path = _names._model_dir(config, None)
    if not (path / "model.json").is_file():
        # In memory already, loaded from some test's own home? Then load it from (or train it into) the session's.
        with _names._cache_lock:
            _names._cache.pop(str(config.key()), None)
        _names.load_name_model(config)
    return path


@pytest.fixture
def seeded_home(tmp_path: Path, name_model_dir: Path) -> Path:
    """An empty LOOPLIFT_HOME of the test's own (for a subprocess), except for a link to the session's name
    model: a collector or CLI started on it anonymizes without training the model again."""
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / name_model_dir.name).symlink_to(name_model_dir, target_is_directory=True)
    return home


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
