"""Hostile code against each sandbox backend: one property per test, each asserting the typed outcome.

Every attack runs in a sandbox borrowed from a pool (one per backend, size 1), and after each one the
next execution from the same pool must still succeed (`_next_ok`). The same suite runs on the Docker
backend (the real engine) and the local backend. Attacks the local backend cannot contain (see
`sandboxes.LOCAL_LIMITATIONS`) are marked `xfail` with the reason: strict where running them is
harmless (so the test fails the day the backend does contain them), `run=False` where running them
would damage the host (filling its disk). Nothing here sends a packet anywhere but loopback.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes import SandboxConfig, SandboxFileError, SandboxPool, make_pool
from sandboxes._local import local_isolation
from _backends import BACKENDS, sandbox_processes
from _resources import in_ci

CFG = SandboxConfig(timeout_s=10, output_limit_bytes=64 * 1024, memory_mb=256, pids=64, workdir_mb=32)
CANARY = "looplift-canary-4f1d9a"  # a host secret that must not be visible inside


def _local_uncontained(reason: str, *, run: bool = True) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=run, run=run, reason=f"local backend cannot contain this: {reason}")


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    os.environ["LOOPLIFT_HOST_SECRET"] = CANARY  # set before any sandbox starts
    p = make_pool(request.param, CFG, size=1)
    try:
        yield p
    finally:
        p.close()
        os.environ.pop("LOOPLIFT_HOST_SECRET", None)


def _backend(pool: SandboxPool) -> str:
    with pool.acquire(timeout=60) as sb:
        return sb.backend


def _next_ok(pool: SandboxPool) -> None:
    """The pool still hands out a working sandbox after the attack."""
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(["python3", "-c", "print('still fine')"])
        assert r.ok and r.stdout == "still fine\n", r


def _xfail_local(request: pytest.FixtureRequest, pool: SandboxPool, reason: str, *, run: bool = True) -> None:
    if _backend(pool) == "local":
        request.applymarker(_local_uncontained(reason, run=run))
        if not run:
            pytest.xfail(f"local backend cannot contain this: {reason} (not run: it would damage the host)")


# -- resources ------------------------------------------------------------------------------------


def test_fork_bomb(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python("import os  # bomb-4f1d\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                          "        pass\n", timeout=3)
        assert r.timed_out and not r.ok and r.exit_code is None
        assert len(sandbox_processes(sb, "bomb-4f1d")) == 0  # nothing of the bomb survives its exec
    _next_ok(pool)


def test_memory_bomb(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python("x = bytearray(1024 * 1024 * 1024)\nx[::4096] = b'x' * len(x[::4096])")
        assert r.oom_killed and not r.ok and not r.timed_out
    _next_ok(pool)


def test_disk_fill_one_file(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(["sh", "-c", f"head -c {(CFG.workdir_mb + 16) * 1024 * 1024} /dev/zero > big"])
        assert r.exit_code != 0 and not r.timed_out
        size = sb.exec(["sh", "-c", "wc -c < big"])
        assert size.ok and int(size.stdout) <= CFG.workdir_mb * 1024 * 1024
    _next_ok(pool)


def test_disk_fill_many_files(pool: SandboxPool, request: pytest.FixtureRequest) -> None:
    _xfail_local(request, pool, "RLIMIT_FSIZE caps each file, not the total", run=False)
    code = (
        "import os\nn = 0\n"
        "try:\n"
        "    while True:\n"
        "        with open(f'f{n}', 'wb') as f: f.write(b'x' * 1024 * 1024)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python(code, timeout=30)
        n, errno_ = r.stdout.split()
        assert r.ok and int(errno_) == 28 and int(n) <= CFG.workdir_mb  # ENOSPC at the workdir's cap
        tmp = sb.exec(["sh", "-c", "head -c 100000000 /dev/zero > /tmp/big"])
        assert tmp.exit_code != 0 and "No space left" in tmp.stderr
    _next_ok(pool)


def test_cpu_bound_loop_is_killed_on_time(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python("while True:\n    pass\n", timeout=1.5)
        assert r.timed_out and r.exit_code is None
    _next_ok(pool)


def test_sleeping_command_is_killed_on_wall_clock(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(["sleep", "600"], timeout=1)
        assert r.timed_out and r.exit_code is None
    _next_ok(pool)


def test_fd_exhaustion(pool: SandboxPool) -> None:
    code = (
        "fs = []\n"
        "try:\n"
        "    while True: fs.append(open('/dev/null'))\n"
        "except OSError as e:\n"
        "    print(len(fs), e.errno)\n"
    )
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python(code)
        n, errno_ = r.stdout.split()
        assert r.ok and int(errno_) == 24 and int(n) <= 1024  # EMFILE at the sandbox's nofile limit
    _next_ok(pool)


# -- output ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_gigabyte_of_stdout(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(["head", "-c", str(1 << 30), "/dev/zero"], timeout=60)
        assert r.ok and r.stdout_truncated and len(r.stdout) == CFG.output_limit_bytes
        assert not r.stderr_truncated and r.stderr == ""
    _next_ok(pool)


def test_binary_output_is_a_string(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(["head", "-c", "200000", "/dev/urandom"])
        assert r.ok and r.stdout_truncated and isinstance(r.stdout, str) and "\ufffd" in r.stdout
        r = sb.run_python("import sys; sys.stderr.buffer.write(b'\\xff\\xfe\\x00ok')")
        assert r.ok and r.stderr == "\ufffd\ufffd\x00ok"
    _next_ok(pool)


# -- processes ------------------------------------------------------------------------------------


def test_orphans_and_zombies_do_not_outlive_the_exec(pool: SandboxPool) -> None:
    code = (
        "import os, subprocess, time\n"
        "subprocess.Popen(['setsid', 'sleep', '4242'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "for _ in range(5):\n"
        "    if os.fork() == 0:\n"
        "        os._exit(0)\n"  # zombies: never waited for
        "if os.fork() == 0:\n"
        "    if os.fork() == 0:\n"
        "        os.setsid(); time.sleep(4243)\n"  # a double-forked daemon
        "    os._exit(0)\n"
        "print('spawned', flush=True)\n"
    )
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python(code, timeout=10)
        assert r.ok and r.stdout == "spawned\n"  # did not wait for the daemon (it sleeps 4243 s: that is a timeout)
        left = sandbox_processes(sb, "")
        assert not [p for p in left if "424" in p], left
        assert not [p for p in left if p.startswith("Z")], left
    _next_ok(pool)


def test_timed_out_exec_leaves_no_process(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(["sh", "-c", "sleep 4244 & sleep 4245 & setsid sleep 4246 & wait"], timeout=1)
        assert r.timed_out
        assert sandbox_processes(sb, "sleep 424") == []
    _next_ok(pool)


@pytest.mark.slow
def test_setuid_mount_unshare_gain_nothing(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python("import os; os.setuid(0)")
        assert r.exit_code != 0 and "PermissionError" in r.stderr
        status = sb.exec(["cat", "/proc/self/status"]).stdout
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["NoNewPrivs"].strip() == "1"
        for cap in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert int(fields[cap], 16) == 0, (cap, fields[cap])
        assert fields["Uid"].split()[:2] == ["65534", "65534"]
        mnt = sb.exec(["sh", "-c", "mkdir -p m && mount -t tmpfs none m"])
        assert mnt.exit_code != 0
        # A user namespace (where the host kernel allows one, as for the local backend) gives "root"
        # over that namespace only: mounting over host paths and writing root's files still fail.
        r = sb.exec(["unshare", "--user", "--map-root-user", "sh", "-c",
                     "mount -t tmpfs none /usr && echo MOUNTED; echo x > /etc/looplift-pwned && echo WROTE"])
        assert "MOUNTED" not in r.stdout and "WROTE" not in r.stdout
        if sb.backend == "docker":
            assert int(fields["CapBnd"], 16) == 0  # nothing left to regain, even in principle
            assert r.exit_code != 0 and "Operation not permitted" in r.stderr  # no user namespaces at all
        setuid_bins = sb.exec(["sh", "-c", "find / -xdev -perm -4000 -type f 2>/dev/null | head -5"]).stdout.split()
        for exe in setuid_bins:  # a setuid-root binary runs as the caller (no-new-privileges)
            probe = sb.exec([exe, "--version"], timeout=5)
            assert not probe.timed_out
    _next_ok(pool)


# -- network (judged without sending a packet anywhere but loopback) -----------------------------


def test_network_only_loopback_and_no_route(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python(
            "import socket\n"
            "print(sorted(name for _, name in socket.if_nameindex()))\n"  # this netns's interfaces
            "print(len([l for l in open('/proc/net/route').read().splitlines()[1:] if l.strip()]))\n"
            "print(len([l for l in open('/proc/net/ipv6_route') if not l.rstrip().endswith('lo')]))\n"
        )
        assert r.ok and r.stdout.splitlines() == ["['lo']", "0", "0"], r
    _next_ok(pool)


def test_dns_fails(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python(
            "import socket\n"
            "try:\n    socket.getaddrinfo('example.com', 80)\n    print('RESOLVED')\n"
            "except OSError as e:\n    print('failed', type(e).__name__)\n",
            timeout=20,
        )
        assert r.ok and r.stdout.startswith("failed"), r
    _next_ok(pool)


@pytest.mark.slow
def test_host_loopback_listener_is_unreachable(pool: SandboxPool) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(0.2)

    def accept() -> None:
        end = time.monotonic() + 8
        while time.monotonic() < end:
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        with pool.acquire(timeout=60) as sb:
            r = sb.run_python(
                "import socket\n"
                f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('CONNECTED')\n"
                "except OSError as e:\n    print('refused', type(e).__name__)\n"
            )
            assert r.ok and r.stdout.startswith("refused"), r
    finally:
        t.join(10)
        server.close()
    assert accepted == []
    _next_ok(pool)


# -- host secrets and the filesystem -------------------------------------------------------------


def test_host_secrets_are_not_visible(pool: SandboxPool) -> None:
    code = (
        "import os, glob\n"
        f"hits = [k for k, v in os.environ.items() if {CANARY!r} in v]\n"
        "for p in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        f"        hits += [p] if {CANARY!r}.encode() in open(p, 'rb').read() else []\n"
        "    except OSError:\n"
        "        pass\n"
        "print('hits', hits)\n"
        "for s in ('/var/run/docker.sock', '/run/docker.sock'):\n"
        "    import socket\n"
        "    c = socket.socket(socket.AF_UNIX)\n"
        "    try:\n        c.connect(s); print('DOCKER SOCKET OPEN', s)\n"
        "    except OSError as e:\n        print('no docker socket', type(e).__name__)\n"
    )
    assert os.environ["LOOPLIFT_HOST_SECRET"] == CANARY
    with pool.acquire(timeout=60) as sb:
        r = sb.run_python(code)
        assert r.ok and "hits []" in r.stdout and "DOCKER SOCKET OPEN" not in r.stdout, r
        env = sb.exec(["env"]).stdout
        assert CANARY not in env and "LOOPLIFT_HOST_SECRET" not in env
    _next_ok(pool)


def test_host_files_of_root_are_not_readable(pool: SandboxPool, tmp_path: Path) -> None:
    if os.geteuid() != 0 and _backend(pool) == "local":
        pytest.fail("the local backend only drops to uid 65534 when the tests run as root (CI does)")
    secret = Path("/root/.looplift-attack-canary") if os.geteuid() == 0 else tmp_path / "canary"
    secret.write_text(CANARY)
    secret.chmod(0o600)
    try:
        with pool.acquire(timeout=60) as sb:
            r = sb.exec(["cat", str(secret)])
            assert r.exit_code != 0 and CANARY not in r.stdout
            assert sb.exec(["ln", "-sf", str(secret), "link"]).ok  # a symlink to the host file
            with pytest.raises(SandboxFileError):
                sb.read_file("link")
    finally:
        secret.unlink()
    _next_ok(pool)


def test_writing_outside_the_workdir_fails(pool: SandboxPool, request: pytest.FixtureRequest) -> None:
    _xfail_local(request, pool, "the host's world-writable dirs (/tmp, /var/tmp, /dev/shm) are shared (see LOCAL_LIMITATIONS)")
    targets = ("/etc/looplift-pwned", "/usr/lib/looplift-pwned", "/looplift-pwned", "/var/tmp/looplift-pwned")
    try:
        with pool.acquire(timeout=60) as sb:
            for target in targets:
                r = sb.exec(["sh", "-c", f"echo x > {target}"])
                assert r.exit_code != 0, target
    finally:
        for target in targets:  # what the local backend let through lands on this host
            Path(target).unlink(missing_ok=True)
    _next_ok(pool)


def test_system_paths_are_not_writable(pool: SandboxPool) -> None:
    with pool.acquire(timeout=60) as sb:
        for target in ("/etc/looplift-pwned", "/usr/lib/looplift-pwned", "/looplift-pwned"):
            r = sb.exec(["sh", "-c", f"echo x > {target}"])
            assert r.exit_code != 0 and not os.path.exists(target), target
    _next_ok(pool)


def test_path_traversal_in_file_helpers_is_refused(pool: SandboxPool, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    with pool.acquire(timeout=60) as sb:
        for bad in ("../../etc/passwd", "/etc/passwd", "a/../../x", f"..{sb.workdir_path}/../x"):
            with pytest.raises(SandboxFileError, match="outside the workdir"):
                sb.write_file(bad, "x")
            with pytest.raises(SandboxFileError):
                sb.read_file(bad)
        # A symlink the code planted in the workdir: the helper writes with the sandbox user's rights,
        # so the host file behind it is never touched.
        sb.exec(["ln", "-s", str(victim), "planted"])
        try:
            sb.write_file("planted", "overwritten")
        except SandboxFileError:
            pass
        assert victim.read_text() == "original"
    _next_ok(pool)


def test_upload_dir_refuses_escapes(pool: SandboxPool, tmp_path: Path) -> None:
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "inside").symlink_to(src / "pkg" / "mod.py")
    with pool.acquire(timeout=60) as sb:
        written = sb.upload_dir(src, "proj")
        assert sorted(os.path.relpath(w, sb.workdir_path) for w in written) == [
            "proj/inside", "proj/pkg/mod.py", "proj/run.sh"]
        assert sb.read_file("proj/inside") == b"X = 1\n"
        assert sb.exec(["./proj/run.sh"]).stdout == "ran\n"
        with pytest.raises(SandboxFileError, match="outside the workdir"):
            sb.upload_dir(src, "../../etc")
        (src / "escape").symlink_to("/etc/passwd")
        with pytest.raises(SandboxFileError, match="outside"):
            sb.upload_dir(src, "proj2")
        assert sb.exec(["ls", "proj2"]).exit_code != 0  # nothing half-uploaded
    _next_ok(pool)


def test_streaming_output_callback(pool: SandboxPool) -> None:
    seen: list[tuple[str, str, float]] = []
    with pool.acquire(timeout=60) as sb:
        r = sb.exec(
            ["python3", "-c",
             "import sys, time\n"
             "print('first', flush=True)\n"
             "time.sleep(1.0)\n"
             "sys.stderr.buffer.write('é'.encode() * 3); sys.stderr.flush()\n"
             "print('last', flush=True)\n"
             "print(repr(time.time()), file=sys.stderr, end='', flush=True)\n"],  # when the command ended
            on_output=lambda stream, text: seen.append((stream, text, time.time())),
        )
        assert r.ok
        assert "".join(t for s_, t, _ in seen if s_ == "stdout") == r.stdout == "first\nlast\n"
        stderr, ended = r.stderr[:3], float(r.stderr[3:])
        assert "".join(t for s_, t, _ in seen if s_ == "stderr") == r.stderr and stderr == "ééé"
        # Streamed: "first" reached the callback before the command ended (same clock: one kernel), not after.
        assert seen[0][:2] == ("stdout", "first\n") and seen[0][2] < ended

        def boom(stream: str, text: str) -> None:
            raise RuntimeError("callback bug")

        with pytest.raises(RuntimeError, match="callback bug"):
            sb.exec(["echo", "x"], on_output=boom)
    _next_ok(pool)


def test_local_isolation_is_what_ci_expects() -> None:
    """The local cases above assume namespaces and the uid drop (root in CI); say so if missing."""
    iso = local_isolation()
    if in_ci():
        assert iso.network_isolated and iso.pid_namespace and iso.drop_user, iso.describe()
