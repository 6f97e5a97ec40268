"""A second Docker engine for tests: a `dockerd` of its own on a unix socket, with its own data root, exec
root (a tmpfs), pid file, config file and containerd namespace under one temp directory (so it shares nothing
with the machine's engine), no bridge and no iptables rules (sandboxes have no network).

`Dockerd.start()` waits for it to answer; `load_image_from(client, tag)` copies an image into it with
docker-py (`save` streamed into `load`, never a file); `crash()` SIGKILLs dockerd alone — an engine dying
under a pool; `cleanup()` removes everything it started, whatever state it is in: dockerd, its containerd,
the shims and container processes (found by this engine's unique paths and by its containers' cgroups),
their mounts and cgroups, and the directory. Needs root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


class Dockerd:
    def __init__(self) -> None:
        # Short path: unix socket paths are limited to 108 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="llsbx-", dir="/tmp"))
        self.url = f"unix://{self.root}/docker.sock"
        self.log = self.root / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> "Dockerd":
        import docker

        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            raise RuntimeError("a second engine needs root and dockerd (apt-get install docker.io)")
        # The data root on a tmpfs: the image's ~7,000 files are then freed by one umount at cleanup instead of
        # being unlinked one by one (18 s on this machine's disk). Where tmpfs cannot be mounted, the disk it is.
        (self.root / "data").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g,mode=0711", "llsbx-data", str(self.root / "data")],
                       check=False, capture_output=True)
        config = self.root / "daemon.json"  # empty: the machine's /etc/docker/daemon.json (hosts, ...) stays out
        config.write_text("{}")
        cmd = [dockerd, "--config-file", str(config), "--host", self.url, "--data-root", str(self.root / "data"), "--exec-root",
               str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"), "--bridge=none",
               "--iptables=false", "--ip-masq=false", "--log-level=warn",
               # Its own containerd namespaces: where a system containerd runs, both engines would use it.
               f"--containerd-namespace={self.root.name}", f"--containerd-plugins-namespace={self.root.name}-plugins"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited {self.proc.returncode}: {self.tail()}")
            try:
                client = docker.DockerClient(base_url=self.url, timeout=5)
                client.ping()
                client.close()
                return self
            except Exception as e:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dockerd did not answer within {timeout:.0f}s ({e}): {self.tail()}") from e
                time.sleep(0.5)

    def tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-8:])
        except OSError:
            return "(no log)"

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.url, timeout=120)

    def load_image_from(self, source: Any, tag: str) -> float:
        """Copy `tag` from the engine `source` (a DockerClient) into this one; returns the seconds it took."""
        t0 = time.monotonic()
        target = self.client()
        try:
            # `save` yields the tar in chunks (named: with its tag) and requests streams a generator as the body.
            for msg in target.api.load_image(source.images.get(tag).save(chunk_size=1 << 20, named=tag)):
                if "error" in msg:  # the engine reports progress, and failures, as a stream
                    raise RuntimeError(f"docker load into {self.url} failed: {msg['error']}")
            target.images.get(tag)  # raises when the load did not produce it
        finally:
            target.close()
        return time.monotonic() - t0

    def crash(self) -> None:
        """SIGKILL dockerd alone: the engine stops answering; its containerd and containers are left running,
        as when a real engine crashes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def cleanup(self) -> None:
        """Remove everything this engine started (see the module docstring). Safe to call in any state."""
        if self.proc is not None and self.proc.poll() is None:
            self._remove_containers()
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        ids = [p.name for p in (self.root / "data" / "containers").glob("*")] if (self.root / "data").exists() else []
        for _ in range(3):  # container processes first, then what supervises them (shims, containerd)
            pids = self._container_pids(ids) | self._engine_pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not pids:
                break
            time.sleep(0.5)
        for mnt in sorted(self._mounts(), key=len, reverse=True):
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        for cid in ids:
            for cg in _cgroups(cid):
                try:
                    cg.rmdir()
                except OSError:
                    pass
        if not self._mounts():  # never delete through a mount point
            shutil.rmtree(self.root, ignore_errors=True)

    def _remove_containers(self) -> None:
        try:
            c = self.client()
            for container in c.api.containers(all=True):
                c.api.remove_container(container["Id"], force=True)
            c.close()
        except Exception:  # noqa: BLE001, S110 - the kill below handles what this could not
            pass

    def _engine_pids(self) -> set[int]:
        """Processes whose command line names this engine's directory or containerd namespace (dockerd, its
        containerd, the shims)."""
        found = set()
        needle = self.root.name.encode()  # llsbx-<random>: in its paths and its namespace
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if needle in (entry / "cmdline").read_bytes():
                        found.add(int(entry.name))
                except OSError:
                    continue
        return found

    @staticmethod
    def _container_pids(ids: list[str]) -> set[int]:
        found = set()
        for cid in ids:
            for procs in (cg / "cgroup.procs" for cg in _cgroups(cid)):
                try:
                    found |= {int(x) for x in procs.read_text().split()}
                except OSError:
                    continue
        return found

    def _mounts(self) -> list[str]:
        prefix = str(self.root)
        with open("/proc/self/mountinfo") as f:
            return [m for m in (line.split()[4].encode().decode("unicode_escape") for line in f)
                    if m == prefix or m.startswith(prefix + "/")]


def _cgroups(cid: str) -> list[Path]:
    """A container's cgroup directories with the cgroupfs driver: one per controller (v1) or one (v2)."""
    root = Path("/sys/fs/cgroup")
    return [p for p in [*root.glob(f"*/docker/{cid}"), root / "docker" / cid] if p.is_dir()]
