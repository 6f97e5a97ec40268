"""Sandboxes on several Docker engines (`sandboxes/_engines.py`): a pool over this machine's engine and a second
`dockerd` the test starts (own socket, data root, exec root; `tests/_dockerd.py`), spread by capacity; the
second engine is then killed (SIGKILL) under the pool: only its sandboxes are lost, they are replaced on the
first engine, and nothing else fails. Before that, a SIGKILLed owner's containers go from both engines (a
reaper per engine). Needs root and the machine's engine with the sandbox image (marker `docker`); without
them the module is skipped with the reason, except under CI (`CI` set), where it fails, as does a second
engine that does not start (tests/_resources.py).

Cost: one dockerd start and one image copy (`docker save` streamed into `docker load`, ~160 MB); the module
prints both times.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
from _resources import needs, require
from _dockerd import Dockerd

from sandboxes import EnginePlacer, EngineSpec, SandboxConfig, SandboxError, SandboxPool, make_pool
from sandboxes._engines import reported_capacity
from sandboxes.errors import EngineUnavailableError, SandboxStartError

CFG = SandboxConfig(timeout_s=20)
MAIN = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


@pytest.fixture(scope="module")
@needs("docker")
def second_engine() -> Iterator[Dockerd]:
    import docker

    engine = Dockerd()
    try:
        t0 = time.monotonic()
        try:
            engine.start()
        except RuntimeError as e:
            require("docker", f"a second dockerd did not start here: {e}")
        started = time.monotonic() - t0
        main = docker.from_env()
        try:
            copied = engine.load_image_from(main, CFG.image)
        finally:
            main.close()
        first = _first_sandbox(engine)
        print(f"\nsecond engine {engine.url}: dockerd answered in {started:.1f} s, image {CFG.image} copied in "
              f"{copied:.1f} s, first sandbox answered in {first:.1f} s")
        yield engine
    finally:
        engine.cleanup()
        assert not engine.root.exists() and not engine._engine_pids(), "the second engine left something behind"


pytestmark = pytest.mark.docker


def _first_sandbox(engine: Dockerd, within_s: float = 90.0) -> float:
    """Start (and close) one sandbox on the new engine before any test uses it, retrying for `within_s`: a
    fresh engine that cannot run a container fails here with Docker's own error and its dockerd log, not later
    as a pool that quietly placed everything on the first engine. Returns the seconds it took."""
    from sandboxes import DockerSandbox

    t0 = time.monotonic()
    client = engine.client()
    try:
        while True:
            try:
                DockerSandbox(CFG, client=client, engine=engine.url).close()
                return time.monotonic() - t0
            except SandboxStartError as e:
                if time.monotonic() - t0 > within_s:
                    require("docker", f"the second dockerd runs no sandbox ({e}); its log: {engine.tail()}")
                time.sleep(2.0)
    finally:
        client.close()


def _on(placer: EnginePlacer, url: str) -> int:
    return next(e["sandboxes"] for e in placer.status() if e["url"] == url)


def _exec_ok(pool: SandboxPool, hold: threading.Barrier) -> str:
    with pool.acquire(timeout=60) as sb:
        res = sb.exec(["python3", "-c", "print(6*7)"])
        hold.wait(60)  # every worker holds a sandbox at once: the pool's whole size is in use
        assert (res.exit_code, res.stdout) == (0, "42\n"), res
        return sb.engine  # type: ignore[attr-defined, no-any-return]


def _all_at_once(pool: SandboxPool, n: int) -> list[str]:
    hold = threading.Barrier(n)
    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(lambda _: _exec_ok(pool, hold), range(n)))


def test_sigkill_of_an_owner_removes_its_containers_on_every_engine(second_engine: Dockerd) -> None:
    """Each engine a process starts sandboxes on gets a reaper of its own (`sandboxes/_reaper.py`): the owner's
    containers go from both engines when it is SIGKILLed. (Runs before the crash test below, which kills the
    second engine.)"""
    code = textwrap.dedent(f"""
        import time
        from sandboxes import SandboxConfig, make_pool
        with make_pool(config=SandboxConfig(timeout_s=20), size=2, engines=["{MAIN}#1", "{second_engine.url}#1"]) as pool:
            with pool.acquire(timeout=60) as a, pool.acquire(timeout=60) as b:
                assert a.exec(["true"]).ok and b.exec(["true"]).ok and {{a.engine, b.engine}} == {{"{MAIN}", "{second_engine.url}"}}
                print("ready", flush=True)
                time.sleep(300)
    """)
    root = str(Path(__file__).resolve().parents[1])  # this checkout's `sandboxes`
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready", (
            owner.communicate()[1][-3000:], second_engine.tail())
        assert [len(_owned(url, owner.pid)) for url in (MAIN, second_engine.url)] == [1, 1]
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while any(_owned(url, owner.pid) for url in (MAIN, second_engine.url)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [_owned(url, owner.pid) for url in (MAIN, second_engine.url)] == [[], []]


def _owned(url: str, pid: int) -> list[str]:
    """Ids of the sandbox containers on the engine at `url` whose owner label names process `pid` here."""
    import docker

    client = docker.DockerClient(base_url=url, timeout=30)
    try:
        found = client.api.containers(all=True, filters={"label": "looplift.owner"})
    finally:
        client.close()
    return [c["Id"] for c in found if c["Labels"]["looplift.owner"].startswith(f"{socket.gethostname()}:{pid}:")]


def test_a_pool_spreads_by_capacity_and_a_dead_engine_takes_out_only_its_sandboxes(second_engine: Dockerd) -> None:
    placer = EnginePlacer([EngineSpec(MAIN, 4), EngineSpec(second_engine.url, 12)], CFG)
    with SandboxPool(placer, size=4, on_close=placer.close) as pool:
        assert pool.wait_ready(120)
        assert (_on(placer, MAIN), _on(placer, second_engine.url)) == (1, 3), (placer.status(), second_engine.tail())  # 4 : 12
        assert sorted(_all_at_once(pool, 4)) == sorted([MAIN] + [second_engine.url] * 3)

        with contextlib.ExitStack() as held:  # all four in use during the crash
            sandboxes = [held.enter_context(pool.acquire(timeout=60)) for _ in range(4)]
            survivor = next(sb for sb in sandboxes if sb.engine == MAIN)  # type: ignore[attr-defined]
            doomed = next(sb for sb in sandboxes if sb.engine == second_engine.url)  # type: ignore[attr-defined]
            container = survivor.container_id  # type: ignore[attr-defined]
            survivor.write_file("kept.txt", "still here")
            second_engine.crash()
            with pytest.raises(SandboxError):  # the dead engine's sandbox, in use, fails ...
                doomed.exec(["true"])
            res = survivor.exec(["cat", "kept.txt"])  # ... the other engine's does not notice
            assert (res.exit_code, res.stdout, survivor.container_id) == (0, "still here", container)  # type: ignore[attr-defined]

        # Every sandbox the pool hands out now runs, on the engine that is left.
        assert _all_at_once(pool, 4) == [MAIN] * 4
        status = {e["url"]: e for e in placer.status()}
        assert status[MAIN]["sandboxes"] == 4 and status[MAIN]["up"]
        assert not status[second_engine.url]["up"] and status[second_engine.url]["error"]


def test_an_engine_is_never_filled_past_its_capacity() -> None:
    placer = EnginePlacer([f"{MAIN}#1"], CFG)
    first = placer()
    try:
        with pytest.raises(SandboxStartError, match=re.escape(f"no sandbox engine can take another sandbox: {MAIN}: full (1/1)")):
            placer()
        first.close()
        placer().close()  # room again once one closed
    finally:
        first.close()
        placer.close()


def test_an_engine_that_does_not_answer_is_left_out(tmp_path: Path) -> None:
    gone = f"unix://{tmp_path}/no-engine.sock"
    with pytest.raises(EngineUnavailableError, match=re.escape(f"no sandbox engine can be used: {gone}: EngineUnavailable")):
        EnginePlacer([gone], CFG)
    with make_pool(config=CFG, size=2, engines=[gone, MAIN]) as pool:
        assert pool.wait_ready(60)
        with pool.acquire() as sb:
            assert sb.engine == MAIN  # type: ignore[attr-defined]


def test_engine_urls_and_capacities_parse() -> None:
    assert EngineSpec.parse("ssh://sbx@node-2#32") == EngineSpec("ssh://sbx@node-2", 32)
    assert EngineSpec.parse(" tcp://10.0.0.7:2376 ") == EngineSpec("tcp://10.0.0.7:2376", None)
    with pytest.raises(ValueError, match="not a Docker engine URL"):
        EngineSpec.parse("10.0.0.7:2376")
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        EngineSpec("unix:///x", 0)
    gib = 1024**3
    # 4 per core, and at most 80% of memory over the sandbox limit (256 MiB): the smaller wins.
    assert reported_capacity({"NCPU": 2, "MemTotal": 24 * gib}, SandboxConfig()) == 8
    assert reported_capacity({"NCPU": 64, "MemTotal": 8 * gib}, SandboxConfig()) == 25
