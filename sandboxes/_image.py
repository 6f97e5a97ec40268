"""Building the sandbox images without a registry.

`build_image(tag)` returns at once when the tag exists. Otherwise it tries `docker pull
python:3.11-slim` with a short timeout (machines in this project have no registry, so this usually
fails fast) and falls back to an offline build: `debootstrap --variant=minbase --include=python3`
into a temporary directory (Debian packages only), then the root filesystem is streamed as a tar
into the engine's import endpoint and tagged. The image holds python3 and coreutils (`timeout`),
which is all the Docker backend needs.

`build_image(flavor="3d")` builds the 3D image (`looplift-sandbox-3d:py311`) the same way, with the
Debian libraries Blender links against added to debootstrap's list, then Blender as the `bpy` module
(and the numpy it imports) installed into the image's python3 by the host's pip, from binary wheels
only (`pip install --target --platform … --no-deps`): the wheels come from the package index at build
time, nothing is fetched when a sandbox runs. No registry image can stand in for it, so it never pulls.
Measured here (2 cores): ~2 minutes, ~1.2 GB (see envs/_modeling/__init__.py for the numbers).

Deliberately not done here: installing debootstrap or Docker (scripts/setup_docker.sh does), multi-arch
builds, pushing anywhere, layering the 3D image on the base one (`docker import` makes one layer; a
second debootstrap costs about a minute and keeps the two recipes independent).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sdk.infra import record_cost

from . import _defaults
from ._engine import _import_docker, docker_client, image_exists
from .errors import ImageBuildError

__all__ = ["FLAVORS", "Flavor", "build_image"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Flavor:
    """What goes into one kind of sandbox image."""

    name: str
    #: Tag `build_image` uses when it is given none.
    tag: str
    #: Debian packages debootstrap adds to the minbase system.
    packages: tuple[str, ...]
    #: pip requirements installed into the image's python3 (binary wheels, no dependency resolution).
    wheels: tuple[str, ...] = ()
    #: Whether `docker pull` of a registry image may stand in for the offline build.
    pullable: bool = False


FLAVORS = {
    "base": Flavor("base", _defaults.IMAGE, ("python3",), pullable=True),
    "3d": Flavor("3d", _defaults.IMAGE_3D, ("python3", *_defaults.IMAGE_3D_PACKAGES), _defaults.IMAGE_3D_WHEELS),
}

# Applied on import: a debootstrap rootfs has no image config, so give it what `docker run` expects.
_IMPORT_CHANGES = [
    f"ENV PATH={_defaults.PATH}",
    "ENV LANG=C.UTF-8",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    f"WORKDIR {_defaults.WORKDIR}",
    'CMD ["sleep", "infinity"]',
    f"LABEL {_defaults.LABEL}=1",
]


def _noop(_: str) -> None:
    pass


def build_image(
    tag: str | None = None,
    *,
    flavor: str = "base",
    force: bool = False,
    progress: Progress | None = None,
    pull: bool = True,
    suite: str = _defaults.DEBIAN_SUITE,
) -> str:
    """Make sure the sandbox image `tag` (default: the flavor's tag) exists on the engine and return how
    it got there.

    `flavor` is "base" (python3 only, `looplift-sandbox:py311`) or "3d" (plus Blender as `bpy`,
    `looplift-sandbox-3d:py311`). Returns "exists", "pulled" or "debootstrap". `force` rebuilds even when
    the tag exists. `progress` receives one human-readable line per step (debootstrap's and pip's own
    output included). `pull=False` skips the registry attempt (the 3D flavor never pulls). Raises
    `EngineUnavailableError` without an engine and `ImageBuildError` with the fix when neither a pull nor
    the offline build works.
    """
    if flavor not in FLAVORS:
        raise ValueError(f"unknown image flavor {flavor!r}; use one of: {', '.join(FLAVORS)}")
    recipe = FLAVORS[flavor]
    tag = tag or recipe.tag
    say = progress or _noop
    client = docker_client()
    try:
        if not force and image_exists(client, tag):
            say(f"image {tag} already exists")
            return "exists"
        if pull and recipe.pullable and _try_pull(client, tag, say):
            return "pulled"
        _build_with_debootstrap(client, tag, suite, say, recipe)
        return "debootstrap"
    finally:
        client.close()


def _try_pull(client: Any, tag: str, say: Progress) -> bool:
    docker = _import_docker()
    repo, _, ref = _defaults.PULL_IMAGE.partition(":")
    say(f"trying `docker pull {_defaults.PULL_IMAGE}` (timeout {_defaults.PULL_TIMEOUT_S:.0f}s)")
    puller = docker.from_env(timeout=_defaults.PULL_TIMEOUT_S)
    try:
        puller.api.pull(repo, tag=ref or "latest")
        image = client.images.get(_defaults.PULL_IMAGE)
    except Exception as e:  # noqa: BLE001 - no registry is the expected case here; any failure means "build offline"
        say(f"pull failed ({type(e).__name__}: {str(e)[:160]}); building offline instead")
        return False
    finally:
        puller.close()
    repo_, _, ref_ = tag.partition(":")
    image.tag(repo_, ref_ or "latest")
    say(f"pulled {_defaults.PULL_IMAGE} and tagged it {tag}")
    return True


def _build_with_debootstrap(client: Any, tag: str, suite: str, say: Progress, recipe: Flavor) -> None:
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError(
            "no registry answered and `debootstrap` is not installed, so the image cannot be built offline; "
            "run `apt-get install -y debootstrap` (or scripts/setup_docker.sh) and try again"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root; run `sudo looplift sandbox build-image` (or setup_docker.sh)")
    work = Path(tempfile.mkdtemp(prefix="looplift-rootfs-"))
    rootfs = work / "rootfs"
    try:
        t0 = time.monotonic()
        include = ",".join(recipe.packages)
        say(f"debootstrap --variant=minbase --include={include} {suite} (about a minute)")
        cmd = [debootstrap, "--variant=minbase", f"--include={include}", suite, str(rootfs)]
        _stream(cmd, say, "debootstrap", "it needs Debian's package mirror to answer")
        _unmount_below(rootfs)
        _slim(rootfs)
        if recipe.wheels:
            _install_wheels(rootfs, recipe.wheels, say)
        (rootfs / _defaults.WORKDIR.lstrip("/")).mkdir(mode=0o1777, exist_ok=True)
        os.chmod(rootfs / _defaults.WORKDIR.lstrip("/"), 0o1777)
        say(f"root filesystem ready in {time.monotonic() - t0:.0f}s; importing into the engine as {tag}")
        _import_rootfs(client, rootfs, tag)
        say(f"image {tag} ready ({time.monotonic() - t0:.0f}s in all)")
        record_cost("image_build", tag, time.monotonic() - t0)
    finally:
        _remove_rootfs(work)


def _stream(cmd: list[str], say: Progress, what: str, hint: str) -> None:
    """Run `cmd`, passing each output line to `say`; ImageBuildError with the last lines when it fails."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        say(line)
    if proc.wait() != 0:
        raise ImageBuildError(f"{what} exited {proc.returncode}; {hint}. Last lines:\n" + "\n".join(tail))


def _image_python(rootfs: Path) -> str:
    """The X.Y of the rootfs's python3 (from its stdlib directory; the rootfs's binaries are not run)."""
    found = sorted(p.name[len("python"):] for p in (rootfs / "usr/lib").glob("python3.*") if (p / "os.py").is_file())
    if len(found) != 1:
        raise ImageBuildError(f"expected one python3 standard library in the image, found {found or 'none'}")
    return found[0]


def _install_wheels(rootfs: Path, wheels: tuple[str, ...], say: Progress) -> None:
    # The host's pip installs for the image's interpreter and glibc (`--platform`/`--python-version`), binary
    # wheels only: nothing is compiled, and the image itself never needs pip or the network.
    version = _image_python(rootfs)
    target = rootfs / f"usr/local/lib/python{version}/dist-packages"  # on Debian's python3 sys.path
    plat = [arg for p in _defaults.IMAGE_3D_PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", *plat,
           "--python-version", version, "--implementation", "cp", "--abi", f"cp{version.replace('.', '')}",
           "--target", str(target), "--no-warn-script-location", "--progress-bar", "off", *wheels]
    say(f"pip install {' '.join(wheels)} into the image's python{version} (binary wheels from the package index)")
    t0 = time.monotonic()
    _stream(cmd, say, "pip", f"the package index must serve {', '.join(wheels)} as wheels for cp{version}")
    say(f"wheels installed in {time.monotonic() - t0:.0f}s")


def _slim(rootfs: Path) -> None:
    # The downloaded .debs and apt lists are a third of the rootfs and useless in a sandbox.
    for d in (rootfs / "var/cache/apt/archives", rootfs / "var/lib/apt/lists"):
        if d.is_dir():
            for p in d.glob("*"):
                if p.is_file():
                    p.unlink()


def _import_rootfs(client: Any, rootfs: Path, tag: str) -> None:
    repo, _, ref = tag.partition(":")
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert tar.stdout is not None and tar.stderr is not None
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.append(tar.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        # requests streams a file object as the request body, so the rootfs never sits in memory.
        answer = client.api.import_image_from_stream(
            _Stream(tar.stdout), repository=repo, tag=ref or "latest", changes=_IMPORT_CHANGES
        )
        if '"error' in str(answer):
            raise ImageBuildError(f"the engine refused the image import: {str(answer)[-500:]}")
    except ImageBuildError:
        tar.kill()
        raise
    except Exception as e:
        tar.kill()
        raise ImageBuildError(f"the engine refused the image import ({type(e).__name__}: {e})") from e
    finally:
        tar.wait()
        reader.join(5)
    if tar.returncode != 0:
        raise ImageBuildError(f"tar of the rootfs failed: {b''.join(err).decode(errors='replace')[-500:]}")
    if not image_exists(client, tag):
        raise ImageBuildError(f"the import finished but {tag!r} is not on the engine; see the dockerd log")


class _Stream:
    """Iterable of chunks over a pipe: requests sends it with chunked transfer encoding."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f

    def __iter__(self) -> Any:
        while chunk := self._f.read(1 << 20):
            yield chunk


def _mounts_below(root: Path) -> list[str]:
    prefix = str(root.resolve())
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].encode().decode("unicode_escape")
            if mnt == prefix or mnt.startswith(prefix + "/"):
                found.append(mnt)
    return found


def _unmount_below(root: Path) -> None:
    # debootstrap mounts /proc, /sys (and sometimes binds /dev) inside the target; a leftover bind of
    # the host's /dev must never be archived or, worse, deleted recursively.
    for mnt in sorted(_mounts_below(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)


def _remove_rootfs(work: Path) -> None:
    if not work.exists():
        return
    _unmount_below(work)
    if _mounts_below(work):
        # Refuse to rmtree through a mount point; leaving a temp dir is the safe failure.
        return
    shutil.rmtree(work, ignore_errors=True)
