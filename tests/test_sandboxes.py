"""Tests of the sandboxes package against the real thing: host subprocesses and a real Docker engine.

Docker tests are marked `docker` and skip (with the reason) only when no engine answers or the
sandbox image is missing; `scripts/setup_docker.sh` provides both. Each adversarial test checks one
property and asserts the typed outcome. Nothing here sends packets anywhere but loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

import sandboxes
from sandboxes import (
    ExecResult,
    LocalSandbox,
    SandboxClosedError,
    SandboxConfig,
    SandboxError,
    SandboxFileError,
    SandboxPool,
    detect_backend,
    make_pool,
    make_sandbox,
)
from sandboxes._cli import app
from sandboxes._local import local_isolation
from _backends import BACKENDS, sandbox_processes
from _resources import needs
from _wait import wait_until

FAST = SandboxConfig(timeout_s=10, output_limit_bytes=4096)


# -- package surface ------------------------------------------------------------------------------


@pytest.mark.slow
def test_import_without_docker_installed() -> None:
    # A None entry in sys.modules makes `import docker` fail as if it were not installed.
    code = (
        "import sys; sys.modules['docker'] = None\n"
        "import sandboxes\n"
        "print(sandboxes.make_sandbox('local').exec(['echo', 'ok']).stdout.strip())\n"
        "try:\n    sandboxes.DockerSandbox()\nexcept sandboxes.EngineUnavailableError as e:\n    print('raised', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "ok"
    assert lines[1].startswith("raised") and "pip install" in lines[1]


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxConfig(memory_mb=0)
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0)


def test_exec_result_ok_and_json() -> None:
    r = ExecResult(0, "a", "", False, False, False, False, 0.1)
    assert r.ok and json.loads(json.dumps(r.to_dict()))["ok"] is True
    assert not ExecResult(0, "", "", False, False, True, False, 0.1).ok
    assert not ExecResult(1, "", "", False, False, False, False, 0.1).ok


# -- shared behaviour, run on each backend -------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def sb(request: pytest.FixtureRequest):  # one sandbox per backend for the cheap, non-destructive tests
    with make_sandbox(request.param, FAST) as s:
        yield s


def _procs_with(sb_or_none, marker: str) -> list[str]:
    """Command lines containing `marker`: on the host (None) or inside a sandbox."""
    if sb_or_none is None:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                found.append(cmd)
        return found
    return [line.split(" ", 1)[1] for line in sandbox_processes(sb_or_none, marker)]


def test_echo(sb) -> None:
    r = sb.exec(["echo", "hello"])
    assert r.ok and r.stdout == "hello\n" and r.stderr == "" and r.exit_code == 0


def test_nonzero_exit_and_stderr(sb) -> None:
    r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)


def test_run_python_and_stdin(sb) -> None:
    r = sb.run_python("import sys; print(sys.stdin.read().upper())", stdin="abc")
    assert r.ok and r.stdout == "ABC\n"


def test_missing_command_is_a_result(sb) -> None:
    r = sb.exec(["definitely-not-a-command"])
    assert r.exit_code == 127 and not r.ok


def test_timeout_sleeping(sb) -> None:
    r = sb.exec(["sleep", "30"], timeout=1)
    assert r.timed_out and r.exit_code is None and not r.oom_killed
    assert r.duration_s >= 0.9  # measured: it ran until the 1 s timeout


def test_timeout_busy_loop(sb) -> None:
    r = sb.run_python("while True: pass", timeout=1)
    assert r.timed_out and r.exit_code is None


def test_timeout_leaves_no_process(sb) -> None:
    marker = "97.3125"  # an unusual duration identifies our sleeps among the host's processes
    r = sb.exec(["sh", "-c", f"sleep {marker} & sleep {marker} & wait"], timeout=1)
    assert r.timed_out
    time.sleep(0.2)
    where = None if sb.backend == "local" else sb
    assert _procs_with(where, f"sleep {marker}") == []


def test_background_process_in_new_session_is_killed(sb) -> None:
    # setsid leaves the process group that `timeout` kills and keeps the output stream open.
    marker = "96.0625"
    r = sb.exec(["sh", "-c", f"setsid sleep {marker} & sleep {marker}"], timeout=1)
    assert r.timed_out
    time.sleep(0.2)
    where = None if sb.backend == "local" else sb
    assert _procs_with(where, f"sleep {marker}") == []
    assert sb.exec(["echo", "still here"]).stdout == "still here\n"


def test_output_cap_sets_truncated(sb) -> None:
    r = sb.run_python("import sys; print('x' * 100000); print('y' * 10, file=sys.stderr)")
    assert r.ok and r.stdout_truncated and not r.stderr_truncated
    assert len(r.stdout.encode()) == FAST.output_limit_bytes and r.stderr == "y" * 10 + "\n"


def test_invalid_utf8_is_replaced(sb) -> None:
    r = sb.run_python("import sys; sys.stdout.buffer.write(bytes([0xff, 0xfe]) + b'ok')")
    assert r.ok and r.stdout == "\ufffd\ufffdok"


def test_write_read_file(sb) -> None:
    sb.write_file("dir/sub/a.txt", "héllo")
    sb.write_file("b.bin", bytes(range(256)))
    assert sb.read_file("dir/sub/a.txt") == "héllo".encode()
    assert sb.read_file("b.bin") == bytes(range(256))
    r = sb.exec(["sh", "-c", "cat dir/sub/a.txt && echo more >> dir/sub/a.txt"])
    assert r.ok and r.stdout == "héllo"
    assert sb.read_file("dir/sub/a.txt").endswith(b"more\n")
    with pytest.raises(SandboxFileError):
        sb.read_file("nope.txt")


def test_reset_empties_workdir(sb) -> None:
    sb.write_file("keep.txt", "x")
    sb.exec(["sh", "-c", "touch .hidden made-by-code"])
    sb.reset()
    r = sb.exec(["ls", "-A"])
    assert r.ok and r.stdout == ""


# -- local backend specifics ----------------------------------------------------------------------


def test_local_limitations_documented() -> None:
    assert "NOT a security boundary" in LocalSandbox.LIMITATIONS
    assert "filesystem" in sandboxes.LOCAL_LIMITATIONS


def test_local_env_is_cleared() -> None:
    os.environ["LOOPLIFT_SECRET_FOR_TEST"] = "s3cret"
    try:
        with LocalSandbox(FAST) as s:
            r = s.exec(["env"])
        assert r.ok and "s3cret" not in r.stdout and "PATH=" in r.stdout
    finally:
        del os.environ["LOOPLIFT_SECRET_FOR_TEST"]


@pytest.mark.skipif(not local_isolation().network_isolated, reason="unshare --net does not work on this host")
def test_local_has_no_network() -> None:
    import socket

    # A listener on the host's loopback: reachable from the host, not from a new network namespace.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        with LocalSandbox(FAST) as s:
            r = s.run_python(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert r.exit_code == 1 and ("refused" in r.stderr or "unreachable" in r.stderr), r.stderr
    finally:
        srv.close()


def test_local_memory_limit() -> None:
    with LocalSandbox(SandboxConfig(memory_mb=128)) as s:
        r = s.run_python("x = b'x' * (512 * 1024 * 1024)")
    assert r.oom_killed and not r.ok and "MemoryError" in r.stderr


def test_local_path_outside_workdir_refused() -> None:
    with LocalSandbox(FAST) as s, pytest.raises(SandboxFileError, match="outside the workdir"):
        s.write_file("../escape.txt", "x")


def test_closed_sandbox_raises() -> None:
    s = LocalSandbox(FAST)
    workdir = s.workdir
    s.close()
    assert not workdir.exists()
    with pytest.raises(SandboxClosedError):
        s.exec(["true"])


def test_local_pool_reuses_and_resets() -> None:
    with make_pool("local", FAST, size=1) as pool:
        with pool.acquire() as s:
            first = s
            s.write_file("x.txt", "1")
        with pool.acquire() as s:
            assert s is first  # the same sandbox, handed out again...
            assert s.exec(["ls", "-A"]).stdout == ""  # ...but reset in between


# -- episodes start clean: every writable place, not just the workdir ------------------------------

#: Run as the sandbox user: find every place it can write (the rw mounts of /proc/self/mounts and writable dirs
#: under them, a few levels deep, plus $HOME and $TMPDIR), leave a marker in each, and a System V shared
#: memory segment and a POSIX message queue; print where it left them.
_MARK = r"""
import ctypes, json, os, sys
tag = sys.argv[1]
skip_fs = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "securityfs", "debugfs", "tracefs", "bpf", "pstore",
           "configfs", "fusectl", "binfmt_misc", "autofs", "hugetlbfs"}
roots = {os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), os.getcwd()}
for line in open("/proc/self/mounts"):
    _, mnt, fs, opts = line.split()[:4]
    if fs not in skip_fs and "rw" in opts.split(",") and not mnt.startswith(("/proc", "/sys")):
        roots.add(mnt.replace("\\040", " "))
dirs = set()
for root in sorted(r for r in roots if r and os.path.isdir(r)):
    for d, subdirs, _ in os.walk(root):
        if d.count("/") - root.count("/") >= 3 or d.startswith(("/proc", "/sys")):
            subdirs[:] = []
        if os.access(d, os.W_OK):
            dirs.add(d)
marked = []
for d in sorted(dirs):
    try:
        with open(os.path.join(d, "marker-" + tag), "w") as f:
            f.write(tag)
        marked.append(d)
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
key = int(tag[:6], 16)
marked.append("sysv-shm" if libc.shmget(key, 4096, 0o1600) >= 0 else "sysv-shm refused")
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
marked.append("mqueue" if libc.mq_open(("/marker-" + tag).encode(), os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
              else "mqueue refused")
print(json.dumps({"dirs": sorted(dirs), "marked": marked}))
"""

#: ... and look for them again: the markers still there, as paths or "sysv-shm"/"mqueue".
_FIND = r"""
import json, os, sys
tag, dirs = sys.argv[1], json.loads(sys.argv[2])
found = [d for d in dirs if os.path.exists(os.path.join(d, "marker-" + tag))]
found += ["sysv-shm" for line in open("/proc/sysvipc/shm").read().splitlines()[1:] if line.split()[0] == str(int(tag[:6], 16))]
found += ["mqueue" for n in (os.listdir("/dev/mqueue") if os.path.isdir("/dev/mqueue") else []) if tag in n]
print(json.dumps(found))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pooled_sandbox_comes_back_with_no_marker_anywhere(backend: str) -> None:
    """Catches: a reset that empties /work and /tmp only, so that /dev/shm, /dev/mqueue, System V IPC, $HOME or
    any other writable place carries one episode's files into the next (Docker: `_inner.SCRATCH` and
    `_remove_sysv`; local: the per-command scratch tmpfs and IPC namespace of `_local._SETUP`)."""
    if backend == "local" and not (local_isolation().mount_namespace and local_isolation().drop_user):
        pytest.skip("the local backend starts clean only with a mount namespace and a separate uid (root + unshare)")
    tag = os.urandom(8).hex()
    with make_pool(backend, FAST, size=1) as pool:
        with pool.acquire() as s:
            first, container = s, getattr(s, "container_id", None)
            r = s.exec(["python3", "-c", _MARK, tag])
            assert r.ok, r
            marks = json.loads(r.stdout)
        assert pool.wait_ready(30)
        with pool.acquire() as s:
            assert s is first and getattr(s, "container_id", None) == container  # the same sandbox, not a new one
            r = s.exec(["python3", "-c", _FIND, tag, json.dumps(marks["dirs"])])
            assert r.ok, r
            assert json.loads(r.stdout) == []
    assert "sysv-shm" in marks["marked"] and "mqueue" in marks["marked"], marks
    if backend == "docker":  # what the search found writable in the container: exactly the places reset empties
        assert set(marks["dirs"]) == {"/work", "/tmp", "/dev/shm", "/dev/mqueue"}, marks


@pytest.mark.skipif(not local_isolation().mount_namespace, reason="no mount namespace here: the local backend "
                                                                    "cannot hide the host")
def test_local_sandbox_does_not_see_the_checkout_or_site_packages() -> None:
    """Catches: a local backend that shows the host's files (the adversary's `find` for HumanEval's reference
    solutions in site-packages took 0.4 s): the checkout, the venv and the homes must be empty (or absent) in a
    command, while python3's standard library still imports."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(sandboxes.__file__)))
    site_dir = os.path.dirname(os.path.dirname(pytest.__file__))
    with LocalSandbox(FAST) as s:
        r = s.exec(["python3", "-c", "import os, sys; print([os.listdir(p) if os.path.isdir(p) else [] for p in sys.argv[1:]])",
                    checkout, site_dir, os.path.expanduser("~")])
        assert r.ok, r
        assert r.stdout.strip() == "[[], [], []]"
        assert s.run_python("import json, sqlite3, unittest; print('stdlib ok')").stdout.strip() == "stdlib ok"


def test_pool_rejects_use_after_close() -> None:
    pool = make_pool("local", FAST, size=1)
    pool.close()
    with pytest.raises(SandboxClosedError), pool.acquire(timeout=1):
        pass


def test_detect_backend_local_preference() -> None:
    assert detect_backend("local") == "local"
    with pytest.raises(ValueError):
        detect_backend("kubernetes")


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_exec_json_and_exit_codes() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["exec", "--backend", "local", "--json", "--", "sh", "-c", "echo hi; exit 4"])
    assert r.exit_code == 4
    assert json.loads(r.stdout)["stdout"] == "hi\n"
    r = runner.invoke(app, ["exec", "--backend", "local", "--timeout", "0.5", "--", "sleep", "5"])
    assert r.exit_code == 124
    r = runner.invoke(app, ["exec", "--backend", "nope", "--", "true"])
    assert r.exit_code == 2


def test_cli_info_json() -> None:
    # No engine at that address (the fast tier never talks to Docker): the answer is local, with the reason.
    r = CliRunner().invoke(app, ["info", "--json"], env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert r.exit_code == 0
    info = json.loads(r.stdout)
    assert info["backend"] == "local" and "no Docker engine" in info["reason"]


# -- Docker backend specifics ---------------------------------------------------------------------


@pytest.fixture
@needs("docker")
def dsb():
    """A fresh Docker sandbox for tests that abuse it."""
    with make_sandbox("docker", FAST) as s:
        yield s


@pytest.mark.docker
def test_docker_network_is_none(dsb) -> None:
    r = dsb.run_python(
        "import os\n"
        "print(sorted(os.listdir('/sys/class/net')))\n"
        "print(len(open('/proc/net/route').read().splitlines()) - 1)\n"
    )
    assert r.ok and r.stdout.splitlines() == ["['lo']", "0"]


@pytest.mark.docker
def test_docker_runs_as_nobody(dsb) -> None:
    r = dsb.exec(["sh", "-c", "id -u; id -g; cat /proc/self/status | grep ^CapEff"])
    lines = r.stdout.split()
    assert r.ok and lines[:2] == ["65534", "65534"] and lines[-1] == "0000000000000000"


@pytest.mark.docker
def test_docker_root_fs_read_only(dsb) -> None:
    r = dsb.exec(["sh", "-c", "echo x > /etc/x"])
    assert r.exit_code != 0 and "Read-only file system" in r.stderr
    with pytest.raises(SandboxFileError):
        dsb.write_file("/usr/bin/evil", "x")


@pytest.mark.docker
def test_docker_memory_bomb_is_oom_killed(dsb) -> None:
    r = dsb.run_python("x = b'x' * (600 * 1024 * 1024)")
    assert r.oom_killed and r.exit_code == 137 and not r.timed_out and not r.ok
    assert dsb.exec(["echo", "alive"]).stdout == "alive\n"


@pytest.mark.docker
def test_docker_fork_bomb_contained(dsb) -> None:
    r = dsb.run_python(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", timeout=3
    )
    assert r.timed_out and not r.ok
    after = dsb.exec(["echo", "ok"])
    assert after.ok and after.stdout == "ok\n"
    count = dsb.exec(["sh", "-c", "ls -d /proc/[0-9]* | wc -l"])
    assert int(count.stdout) < 10  # init, keeper, this shell and its children: the bomb is gone


@pytest.mark.docker
def test_docker_workdir_is_capped(dsb) -> None:
    r = dsb.exec(["sh", "-c", f"head -c {(FAST.workdir_mb + 8) * 1024 * 1024} /dev/zero > big"])
    assert r.exit_code != 0 and "No space left" in r.stderr


@pytest.mark.docker
def test_docker_container_killed_by_hand_is_replaced(dsb) -> None:
    import docker

    dsb.write_file("x.txt", "1")
    old = dsb.container_id
    docker.from_env().api.kill(old)
    assert not dsb.is_alive()
    r = dsb.exec(["echo", "back"])  # the sandbox heals itself: new container, empty workdir
    assert r.ok and r.stdout == "back\n" and dsb.container_id != old and dsb.replacements == 1


@pytest.mark.docker
def test_docker_container_removed_mid_command_is_a_result(dsb) -> None:
    import docker

    old = dsb.container_id
    threading.Timer(0.5, lambda: docker.from_env().api.remove_container(old, force=True)).start()
    r = dsb.exec(["sleep", "20"], timeout=15)
    assert r.exit_code == 137 and not r.ok and not r.timed_out  # ended by the removal, not by the 15 s timeout
    assert dsb.exec(["echo", "healed"]).stdout == "healed\n" and dsb.container_id != old


@pytest.mark.docker
def test_docker_close_removes_container() -> None:
    import docker

    s = make_sandbox("docker", FAST)
    cid = s.container_id
    s.close()
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().api.inspect_container(cid)


@pytest.mark.docker
def test_docker_pool_acquire_reset_replace() -> None:
    import docker

    engine = docker.from_env()
    with make_pool("docker", FAST, size=1) as pool:
        with pool.acquire() as s:
            s.write_file("left.txt", "x")
            s.exec(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"])
            cid = s.container_id
        with pool.acquire() as s:
            assert s.container_id == cid  # reused...
            assert s.exec(["ls", "-A"]).stdout == ""  # ...reset: files gone
            assert _procs_with(s, "sleep 300") == []  # ...and processes gone
        assert pool.wait_ready(10)
        engine.api.kill(cid)  # a container dies while idle in the pool
        with pool.acquire(timeout=30) as s:
            assert s.is_alive() and s.exec(["echo", "fresh"]).ok
            assert s.container_id != cid
            fresh = s.container_id
        all_ids = {c["Id"] for c in engine.api.containers(all=True, filters={"label": "looplift.sandbox"})}
    assert cid not in all_ids
    left = {c["Id"] for c in engine.api.containers(all=True, filters={"label": "looplift.sandbox"})}
    assert fresh not in left  # close() removed everything


@pytest.mark.docker
def test_docker_pool_concurrent_threads_and_async() -> None:
    with make_pool("docker", FAST, size=2) as pool:
        results: list[str] = []

        def work(i: int) -> None:
            with pool.acquire(timeout=60) as s:
                results.append(s.exec(["echo", str(i)]).stdout.strip())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results, key=int) == [str(i) for i in range(6)]

        async def main() -> list[str]:
            async def one(i: int) -> str:
                async with pool.aacquire(timeout=60) as s:
                    return (await asyncio.to_thread(s.exec, ["echo", f"a{i}"])).stdout.strip()

            return list(await asyncio.gather(*(one(i) for i in range(4))))

        assert asyncio.run(main()) == ["a0", "a1", "a2", "a3"]


@pytest.mark.docker
def test_cli_exec_docker() -> None:
    r = CliRunner().invoke(app, ["exec", "--backend", "docker", "--json", "--", "python3", "-c", "print(6*7)"])
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["stdout"] == "42\n" and out["backend"] == "docker"


def test_a_waiting_acquire_retries_a_start_that_failed() -> None:
    """One sandbox in use, the other's start failed (its engine was down) and the acquire that wants it began
    while it was still down: when the engine comes back, the waiting acquire gets a sandbox, instead of waiting
    for the one in use (the pool over several engines relies on it: a dead engine's sandboxes come back)."""
    import threading

    up = threading.Event()
    calls: list[int] = []

    def engine() -> LocalSandbox:
        calls.append(1)
        if len(calls) > 1 and not up.is_set():  # the constructor's start works, every later one fails for now
            raise SandboxError("engine down")
        return LocalSandbox(FAST)

    with SandboxPool(engine, size=2) as pool:
        with pool.acquire(timeout=10) as first:
            threading.Timer(2.0, up.set).start()  # the engine comes back while the acquire below waits
            with pool.acquire(timeout=20) as second:
                assert second is not first and second.exec(["true"]).ok


def test_an_idle_sandbox_that_dies_is_replaced_before_anyone_asks() -> None:
    """Broken variant: a dead idle sandbox found only by the next acquire, which then waits for a start. The
    pool's watch (every IDLE_CHECK_S) replaces it while nobody holds the pool."""
    from sandboxes import _defaults

    pool = SandboxPool(lambda: LocalSandbox(FAST), size=1)
    try:
        assert pool.wait_ready(10)
        with pool.acquire() as s:
            first = s
        wait_until(lambda: pool.stats().idle == 1, "the reset")
        first.close()  # dies while idle
        wait_until(lambda: pool.stats().replaced == 1 and pool.stats().idle == 1, "the dead idle one replaced",
                   timeout=_defaults.IDLE_CHECK_S * 3)
        with pool.acquire(timeout=0.5) as s:  # warm at once: no start left to wait for
            assert s is not first and s.is_alive()
    finally:
        pool.close()


def test_pool_never_hands_out_dead_local_sandbox() -> None:
    pool = SandboxPool(lambda: LocalSandbox(FAST), size=1)
    try:
        assert pool.wait_ready(10)
        with pool.acquire() as s:
            first = s
        time.sleep(0.2)  # let the background reset finish
        first.close()  # dies while idle
        with pool.acquire(timeout=10) as s:
            assert s is not first and s.is_alive()
    finally:
        pool.close()


@pytest.mark.docker
def test_containers_of_a_killed_process_are_reaped() -> None:
    """A process killed without cleanup (os._exit skips finalizers, like SIGKILL) whose reaper is gone too
    (killed with it, or before the reaper blocked SIGTERM) leaks its container; the next process that starts a
    Docker sandbox removes it. (With its reaper alive the container goes at once: test_lifetimes.)"""
    import subprocess
    import sys

    from sandboxes import DockerSandbox
    from sandboxes._docker import reap_orphans
    from sandboxes._engine import docker_client

    code = ("import os, signal, sandboxes, sandboxes._reaper as r; sb = sandboxes.DockerSandbox(); "
            "g = r._reapers[None][1]; os.kill(g.guardian_pid, signal.SIGKILL); g.wait(30); "
            "print(sb.container_id, flush=True); os._exit(0)")
    cid = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120).stdout.strip()
    client = docker_client()
    # Leaked: the runner exits when its host connection closes, so the container stops, but it stays.
    assert client.api.inspect_container(cid)["Id"] == cid
    with DockerSandbox() as live:  # the first Docker sandbox of a process reaps; a live owner's container stays
        reap_orphans(client)  # explicit call: idempotent
        ids = {c["Id"] for c in client.api.containers(all=True)}
        assert cid not in ids and live.container_id in ids
        assert live.exec(["true"]).ok


# -- pool stats: what the dashboard shows per app ------------------------------------------------------


def test_pool_stats_count_failed_starts_and_in_use() -> None:
    calls: list[int] = []

    def engine() -> LocalSandbox:
        calls.append(1)
        if len(calls) == 2:  # the second start fails once (its engine was down); the retry works
            raise SandboxError("engine down")
        return LocalSandbox(FAST)

    with SandboxPool(engine, size=2) as pool:
        with pool.acquire(timeout=10), pool.acquire(timeout=20):
            st = pool.stats()
            assert (st.size, st.in_use, st.idle) == (2, 2, 0)
            assert st.start_failures == 1 and st.started == 2 and st.replaced == 0
        assert pool.wait_ready(10)
        st = pool.stats()
        assert (st.in_use, st.idle, st.resetting, st.starting) == (0, 2, 0, 0)
        assert set(st.snapshot()) == {"size", "in_use", "idle", "resetting", "starting", "started", "start_failures",
                                      "replaced"} and all(isinstance(v, int) for v in st.snapshot().values())


@pytest.mark.docker
def test_docker_pool_stats_reach_each_steps_info() -> None:
    """The snapshot in a step's info is the real pool: size, the sandbox this episode holds, a replaced container."""
    import docker

    from sdk import Task
    from envs import ArithmeticEnv, ShellEnv

    engine = docker.from_env()
    with make_pool("docker", FAST, size=2) as pool:
        assert pool.wait_ready(60)
        env = ArithmeticEnv(pool=pool)
        env.reset(Task(id="arith:1", prompt="2+2", data={"answer": 4}))
        info = env.step("```python\nprint(2+2)\n```").info
        assert info["exit_code"] == 0
        assert info["sandbox_pool"] == {"size": 2, "in_use": 1, "idle": 1, "resetting": 0, "starting": 0, "started": 2,
                                        "start_failures": 0, "replaced": 0}
        assert pool.wait_ready(30)
        shell = ShellEnv(pool)  # holds one sandbox from reset to close
        shell.reset(Task(id="shell:1", prompt="list", data={}))
        with pool.acquire(timeout=30) as other:
            cid = other.container_id
        wait_until(lambda: pool.idle == 1, "the other sandbox back in the pool", timeout=30)
        engine.api.kill(cid)  # dies while idle: the next acquire replaces it
        engine.api.wait(cid, timeout=30)
        snap = shell.step("echo hi").info["sandbox_pool"]
        assert (snap["size"], snap["in_use"], snap["idle"], snap["replaced"]) == (2, 1, 1, 0)  # not noticed yet
        with pool.acquire(timeout=60) as fresh:
            assert fresh.container_id != cid
        wait_until(lambda: pool.idle == 1, "the fresh sandbox back in the pool", timeout=30)
        snap = shell.step("echo again").info["sandbox_pool"]
        assert (snap["in_use"], snap["idle"], snap["replaced"], snap["started"]) == (1, 1, 1, 3)
        shell.close()
        assert pool.stats().in_use == 0


def test_every_arithmetic_step_on_a_pool_carries_its_stats() -> None:
    from sdk import Task
    from envs import ArithmeticEnv

    with make_pool("local", FAST, size=2) as pool:
        env = ArithmeticEnv(pool=pool)
        env.reset(Task(id="arith:1", prompt="2+2", data={"answer": 4}))
        ran = env.step("```python\nprint(2+2)\n```").info["sandbox_pool"]
        hint = env.step("four?").info  # no code, no answer: nothing ran, the pool's stats are still there
        assert ran["size"] == 2 and ran["in_use"] == 1  # taken while this step held its sandbox
        assert hint["format_error"] and hint["sandbox_pool"]["size"] == 2
