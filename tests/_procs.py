"""Processes a test started and what they left: `Run` starts `looplift ...` in its own session with its own
LOOPLIFT_HOME and finds every process of it after a kill (test_lifetimes, test_e2e's demo stopped mid-swap); /proc
readers, the sandbox containers of an owner, loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sdk.infra import env_without_config

ROOT = Path(__file__).resolve().parents[1]
#: How long a killed parent's processes may take to go (vLLM's grace period is 10 s, then SIGKILL).
GONE_WITHIN_S = 30.0


def stat(pid: int | str) -> list[str]:
    """Fields 3.. of /proc/PID/stat (state, ppid, pgrp, session, ...); [] when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def alive(pid: int) -> bool:
    """A process that runs: not gone, not a zombie waiting to be reaped."""
    st = stat(pid)
    return bool(st) and st[0] != "Z"


def settles(cond: Callable[[], bool], timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def env(**extra: str) -> dict[str, str]:
    env = env_without_config()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def owned_containers(owner_pid: int) -> list[str]:
    """Names of the sandbox containers (running or stopped) whose owner label names `owner_pid` on this host."""
    import docker

    prefix = f"{socket.gethostname()}:{owner_pid}:"
    client = docker.from_env()
    try:
        found = client.api.containers(all=True, filters={"label": "looplift.owner"})
    finally:
        client.close()
    return [c["Names"][0] for c in found if (c.get("Labels") or {}).get("looplift.owner", "").startswith(prefix)]


def listening(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port` (a bind with SO_REUSEADDR fails only then)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """Live processes whose parent is `pid`."""
    return [int(p) for p in filter(str.isdigit, os.listdir("/proc")) if (st := stat(p)) and st[0] != "Z"
            and int(st[1]) == pid]


def environ_has(pid: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


class Run:
    """One `looplift ...` process with its own LOOPLIFT_HOME, in its own session, output to a file.

    `ours()` finds what it started even after the kill has orphaned it: every process that carries the run's
    LOOPLIFT_HOME in its environment (the run, guardians, vLLM's API server, the sandbox reaper), and every
    process in a session one of those leads. The second part is for vLLM's `VLLM::EngineCore` and
    `VLLM::Worker`: setproctitle writes their title over the environment, so only their session shows them."""

    def __init__(self, args: list[str], home: Path) -> None:
        self.home = home
        self.log = home / "run.log"
        self._marker = f"LOOPLIFT_HOME={home}".encode()
        self._sessions: set[str] = set()
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "looplift", *args], cwd=home,
                                         env=env(LOOPLIFT_HOME=str(home)), stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert self.proc.poll() is None, f"exited ({self.proc.returncode}) before {what}:\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s:\n{self.output()[-3000:]}"
            time.sleep(0.2)

    def ours(self) -> list[str]:
        """`pid cmdline` of every live process of this run (the run itself included, until it is reaped)."""
        stats = {p: stat(p) for p in filter(str.isdigit, os.listdir("/proc"))}
        for p, st in stats.items():
            if st and st[3] == p and environ_has(p, self._marker):  # a session leader of ours
                self._sessions.add(p)
        return [f"{p} {cmdline(int(p))[:120]}" for p, st in stats.items()
                if st and st[0] != "Z" and (st[3] in self._sessions or environ_has(p, self._marker))]

    def engine_core_running(self) -> bool:
        return any("VLLM::EngineCore" in line for line in self.ours())

    def vllm_port(self) -> int | None:
        for log in [self.home / "logs" / "vllm.log", *self.home.glob("demo/*/vllm.log")]:
            if log.exists():
                words = log.read_text(errors="replace").split("\n", 1)[0].split()
                if "--port" in words:
                    return int(words[words.index("--port") + 1])
        return None

    def kill(self, sig: int) -> None:
        self.ours()  # note the sessions of what runs now
        self.proc.send_signal(sig)  # the process only, as `kill PID` does: it must stop its children itself

    def assert_nothing_left(self, ports: list[int]) -> None:
        code = self.proc.wait(120)
        assert settles(lambda: not self.ours(), GONE_WITHIN_S, step=0.5), self.ours()
        assert settles(lambda: owned_containers_or_none(self.proc.pid) in ([], None), GONE_WITHIN_S, step=0.5)
        busy = [p for p in ports if listening(p)]
        assert busy == [], f"still listening: {busy}"
        assert "Traceback" not in self.output(), self.output()[-3000:]
        self.code = code


def owned_containers_or_none(pid: int) -> list[str] | None:
    """Like `owned_containers`, or None when no Docker engine answers (the run then used local sandboxes)."""
    try:
        return owned_containers(pid)
    except Exception:  # noqa: BLE001 - no engine, no docker-py: nothing of ours can be there
        return None


def candidate_loaded(home: Path, version: str = "policy-v1") -> bool:
    """A demo under `home` has loaded the trained adapter `version` into its gateway: the swap is under way."""
    import json

    for reg in home.glob("demo/*/server/registry.json"):
        try:
            versions = json.loads(reg.read_text())["versions"]
        except (OSError, ValueError, KeyError):
            continue
        if any(v["name"] == version for v in versions):
            return True
    return False


