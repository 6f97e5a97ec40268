"""Nothing outlives the process that started it.

First `sdk.infra.spawn_tied` / `die_with_parent` with small Python children (fast): a SIGKILLed parent leaves no
child or grandchild, `stop()` escalates to SIGKILL, a child started from a worker thread outlives the thread,
exit statuses come through. Then the components that start processes: Docker sandboxes of a SIGKILLed owner,
`collector serve --workers`. Then (slow, real vLLM) `looplift up` and `looplift demo` as a user runs them,
killed with SIGTERM or SIGKILL during the base-model build and during vLLM's start (SIGTERM in the middle of a
swap is the end of test_e2e's demo); after each kill no process that carries the run's LOOPLIFT_HOME, no container of the
killed owner and no listener on its ports may remain (a bounded wait: vLLM gets its grace period).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from _procs import GONE_WITHIN_S, Run
from _procs import alive as _alive
from _procs import children as _children
from _procs import env as _env
from _procs import free_port as _free_port
from _procs import listening as _listening
from _procs import owned_containers as _owned_containers
from _procs import settles as _wait_until

from sdk.infra import spawn_tied

ROOT = Path(__file__).resolve().parents[1]


# ---- helpers -------------------------------------------------------------------------------------------
def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


#: A child that ignores SIGTERM, forks a grandchild that does too, writes both pids, then sleeps.
STUBBORN = """
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {pid}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(300)
"""


def _pids(path: Path) -> list[int]:
    assert _wait_until(path.exists, 30), "the child did not start"
    return [int(p) for p in path.read_text().split()]


# ---- spawn_tied -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigkill_of_the_parent_leaves_no_child_or_grandchild(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    parent = subprocess.Popen(_python(f"""
        import sys, time
        from sdk.infra import spawn_tied
        child = spawn_tied([sys.executable, "-c", {textwrap.dedent(STUBBORN)!r}, {str(pids)!r}], grace_s=1.0)
        print(child.pid, child.guardian_pid, flush=True)
        time.sleep(300)
    """), env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child, guardian = (int(x) for x in parent.stdout.readline().split())
        tied = _pids(pids)
        assert tied[0] == child and all(_alive(p) for p in [guardian, *tied])
    finally:
        parent.kill()
        parent.wait()
    # SIGTERM is ignored by both, so this is the guardian's SIGKILL after its grace period.
    assert _wait_until(lambda: not any(_alive(p) for p in [guardian, *tied]), GONE_WITHIN_S)


def test_stop_escalates_to_sigkill_for_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    proc = spawn_tied(_python(STUBBORN) + [str(pids)], grace_s=30.0)
    tied = _pids(pids)
    assert proc.stop(grace_s=0.5) == -signal.SIGKILL
    assert not any(_alive(p) for p in tied)
    assert proc.stop() == -signal.SIGKILL  # idempotent


def test_a_child_started_from_a_worker_thread_outlives_the_thread(tmp_path: Path) -> None:
    # PR_SET_PDEATHSIG fires when the spawning *thread* exits; the guardian must not take that for our death.
    box: list = []
    t = threading.Thread(target=lambda: box.append(spawn_tied(["sleep", "300"])))
    t.start()
    t.join()
    proc = box[0]
    time.sleep(1.0)  # time for a mistaken stop (the signal arrives at once; the guardian would act within 0.1 s)
    try:
        assert proc.poll() is None and _alive(proc.pid)
    finally:
        proc.stop()
    assert not _alive(proc.pid)


def test_dropping_the_handle_stops_the_child() -> None:
    proc = spawn_tied(["sleep", "300"])
    pid, guardian = proc.pid, proc.guardian_pid
    del proc  # the lifeline socket closes with it
    assert _wait_until(lambda: not _alive(pid) and not _alive(guardian), GONE_WITHIN_S)


@pytest.mark.parametrize(("script", "code"), [("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM), ("true", 0)])
def test_the_exit_status_is_the_commands(script: str, code: int) -> None:
    assert spawn_tied(["sh", "-c", script]).wait(30) == code


def test_what_an_exited_command_left_running_is_ended(tmp_path: Path) -> None:
    out = tmp_path / "bg"
    proc = spawn_tied(["sh", "-c", f"sleep 300 & echo $! > {out}; exit 0"], grace_s=1.0)
    assert proc.wait(30) == 0
    assert not _alive(int(out.read_text()))


def test_a_command_that_cannot_start_raises_like_popen(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        spawn_tied([str(tmp_path / "no-such-program")])


@pytest.mark.slow
def test_die_with_parent_ends_a_child_the_parent_did_not_tie() -> None:
    # What `collector serve --workers` does in each uvicorn worker.
    parent = subprocess.Popen(_python("""
        import os, subprocess, sys, time
        code = "import os, sys, time; from sdk.infra import die_with_parent; die_with_parent(int(sys.argv[1])); " \\
               "print(os.getpid(), flush=True); time.sleep(300)"
        subprocess.Popen([sys.executable, "-c", code, str(os.getpid())], stdout=sys.stdout)
        time.sleep(300)
    """), env=_env(), stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    assert _wait_until(lambda: not _alive(child), GONE_WITHIN_S)


# ---- components that start processes --------------------------------------------------------------------
@pytest.mark.docker
def test_sigkill_of_a_sandbox_owner_removes_its_containers() -> None:
    owner = subprocess.Popen(_python("""
        import time
        from sandboxes import make_pool
        with make_pool("docker", size=2) as pool:
            with pool.acquire() as a, pool.acquire() as b:
                assert a.run_python("print(1)").ok and b.run_python("print(2)").ok
                print("ready", flush=True)
                time.sleep(300)
    """), env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        assert len(_owned_containers(owner.pid)) >= 2
    finally:
        owner.kill()
        owner.wait()
    # Removed by the owner's reaper now, not by the next process that happens to call `reap_orphans`.
    assert _wait_until(lambda: _owned_containers(owner.pid) == [], GONE_WITHIN_S, step=0.5)


@pytest.mark.slow
def test_collector_workers_die_with_a_sigkilled_supervisor(tmp_path: Path, seeded_home: Path) -> None:
    port = _free_port()
    log = tmp_path / "collector.log"
    with log.open("w") as out:
        sup = subprocess.Popen([sys.executable, "-m", "collector._cli", "serve", "--workers", "2", "--port", str(port),
                                "--db", f"sqlite:///{tmp_path / 'c.db'}"],
                               env=_env(LOOPLIFT_HOME=str(seeded_home)), stdout=out, stderr=subprocess.STDOUT)
    try:
        assert _wait_until(lambda: log.read_text().count("Application startup complete") >= 2 or sup.poll() is not None,
                           120, step=0.2), log.read_text()[-2000:]
        assert sup.poll() is None, log.read_text()[-2000:]
        workers = _children(sup.pid)
        assert len(workers) >= 2 and _listening(port)
    finally:
        sup.kill()
        sup.wait()
    assert _wait_until(lambda: not any(_alive(p) for p in workers), GONE_WITHIN_S), log.read_text()[-2000:]
    assert _wait_until(lambda: not _listening(port), GONE_WITHIN_S)


# ---- `looplift up` / `looplift demo`, killed as a user would (slow: real vLLM) ------------------------------
def _health(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def tiny_model(looplift_model_dir: Path) -> Path:
    """The session's untrained tiny model, copied into a home's base-model cache by `_home` (what `up` serves does not
    matter here)."""
    return looplift_model_dir


def _home(tmp_path: Path, model: Path | None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh LOOPLIFT_HOME; with `model`, that model sits in its base-model cache, so no build runs."""
    import shutil

    from trainer import base_model_dir

    home = tmp_path / "home"
    home.mkdir()
    if model is not None:
        with monkeypatch.context() as m:
            m.setenv("LOOPLIFT_HOME", str(home))
            shutil.copytree(model, base_model_dir())
    return home


slow_vllm = [pytest.mark.slow, pytest.mark.vllm]


@pytest.mark.slow
@pytest.mark.model_build
def test_up_sigterm_during_the_base_model_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path, None, monkeypatch)
    gw, col = _free_port(), _free_port()
    run = Run(["up", "--gateway-port", str(gw), "--collector-port", str(col)], home)
    run.wait_for(lambda: "building the tiny base model" in run.output(), "the build", timeout=300)
    time.sleep(3)  # well inside the training loop
    run.kill(signal.SIGTERM)
    run.assert_nothing_left([gw, col])
    assert run.code == 0 and "stopped (SIGTERM)" in run.output()
    assert list((home / "models").glob("*tiny-*")) == []  # no half-built model, no temp dir


# SIGTERM while serving is `test_e2e.test_up_serves_the_example_and_the_collector`'s ending; SIGKILL during
# vLLM's start is `test_demo_sigkill_during_vllm_start`'s moment; SIGKILL while serving (and capturing) is the
# soak's `collector_kill_ingest` (tests/test_soak.py: the operator restarts `up` on the same ports, and nothing of
# either run is left at the end).
@pytest.mark.slow
@pytest.mark.vllm
def test_up_sigterm_during_vllm_start(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path, tiny_model, monkeypatch)
    gw, col = _free_port(), _free_port()
    run = Run(["up", "--gateway-port", str(gw), "--collector-port", str(col)], home)
    # The engine core initializing: the moment a SIGTERM makes vLLM's API server hang forever.
    run.wait_for(run.engine_core_running, "vLLM's engine core")
    assert not _health(gw)
    vllm_port = run.vllm_port()
    assert vllm_port is not None
    run.kill(signal.SIGTERM)
    run.assert_nothing_left([gw, col, vllm_port])
    assert run.code == 0 and "stopped (SIGTERM)" in run.output(), run.output()[-2000:]


DEMO_ARGS = ["demo", "--cycles", "1", "--episodes", "48", "--held-out", "10", "--json-out", "demo.json"]


@pytest.mark.slow
@pytest.mark.vllm
def test_demo_sigkill_during_vllm_start(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run(DEMO_ARGS, _home(tmp_path, tiny_model, monkeypatch))
    run.wait_for(run.engine_core_running, "vLLM's engine core")
    vllm_port = run.vllm_port()
    assert vllm_port is not None
    run.kill(signal.SIGKILL)
    run.assert_nothing_left([vllm_port])  # and the sandbox pool's containers


# ---- failures print one line -----------------------------------------------------------------------------
def _one_line_failure(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    out = p.stdout + p.stderr
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert p.returncode != 0 and len(errors) == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]


def _broken_model(request: pytest.FixtureRequest, tmp_path: Path, how: str) -> Path:
    """A model directory without config.json (a looplift.json marker, as the base-model cache has), or the
    tiny model with a truncated config.json (vLLM exits while loading it)."""
    import shutil

    model = tmp_path / "broken"
    if how == "no-config":
        model.mkdir()
        (model / "looplift.json").write_text("{}")
    else:
        shutil.copytree(request.getfixturevalue("tiny_model"), model)
        (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": ')
    return model


@pytest.mark.parametrize("how", ["no-config", pytest.param("corrupt-config", marks=slow_vllm)])
@pytest.mark.slow
def test_up_with_a_broken_model_says_so_in_one_line(how: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    model = _broken_model(request, tmp_path, how)
    p = subprocess.run([sys.executable, "-m", "looplift", "up", "--model", str(model), "--gateway-port",
                        str(_free_port()), "--collector-port", str(_free_port())],
                       env=_env(LOOPLIFT_HOME=str(tmp_path)), capture_output=True, text=True, timeout=600)
    # `up --model` checks the directory before it starts anything (the doctor's preflight): the truncated
    # config.json is named with its fix, instead of vLLM's start failing on it.
    _one_line_failure(p, "no config.json" if how == "no-config" else "config.json is not JSON")


@pytest.mark.parametrize("how", ["no-config", pytest.param("corrupt-config", marks=slow_vllm)])
@pytest.mark.slow
def test_demo_with_a_broken_cached_model_says_so_in_one_line(how: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path, _broken_model(request, tmp_path, how), monkeypatch)
    p = subprocess.run([sys.executable, "-m", "looplift", *DEMO_ARGS], cwd=home,
                       env=_env(LOOPLIFT_HOME=str(home)), capture_output=True, text=True, timeout=600)
    _one_line_failure(p, "no config.json" if how == "no-config" else "vLLM did not start")
