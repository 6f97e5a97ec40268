"""Models the suite builds once and keeps, by a hash of everything that determines them.

A model is built by the product's own command line (`trainer build-base --out`, `looplift model build --out`) in a
child process: the suite measures coverage in its own process only, and under coverage's tracer the in-process base
build took 1,032 s in CI where the same build alone takes a few minutes (issue 31). The result is cached under
`$LOOPLIFT_TEST_CACHE` (default `~/.cache/looplift-tests`) in a directory named by the hash of the build's
arguments, the source of the packages that make the model (`trainer`, `envs`, `sdk`) and the versions of torch and
transformers: a change to any of them builds again, and a second run on the same code builds nothing. A fresh
machine (CI) builds each model once per run. The directory is written under a temporary name and renamed, and a
lock file keeps two runs from building the same model at once.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: `looplift_small_trained_model`'s BaseModelConfig fields (conftest; test_trainer checks its determinism).
SMALL_TRAINED_FIELDS = {"n_demos": 300, "steps": 30, "batch_size": 16}
#: The packages whose source decides what a built model is.
SOURCES = ("trainer", "envs", "sdk")


def cache_root() -> Path:
    return Path(os.environ.get("LOOPLIFT_TEST_CACHE") or Path.home() / ".cache" / "looplift-tests")


@functools.cache
def _code_hash() -> str:
    h = hashlib.sha256()
    for pkg in SOURCES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    for dist in ("torch", "transformers", "tokenizers"):
        h.update(f"{dist}={metadata.version(dist)}".encode())
    return h.hexdigest()


def built_model(name: str, argv: list[str], timeout: float = 1800) -> Path:
    """The model directory `argv` (a command line whose `--out` is appended) builds, from the cache or built now.
    `name` is only for people reading the cache directory."""
    key = hashlib.sha256(("\0".join(argv) + "\0" + _code_hash()).encode()).hexdigest()[:16]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"{name}-{key}"
    with open(root / f".{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second run waits for the first's build, then finds it
        if (out / "config.json").is_file():
            return out
        tmp = root / f".{name}-{key}.building"
        shutil.rmtree(tmp, ignore_errors=True)
        p = subprocess.run([*argv, "--out", str(tmp)], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0 or not (tmp / "config.json").is_file():
            raise RuntimeError(f"building {name} failed ({' '.join(argv)}): rc {p.returncode}\n{p.stdout[-2000:]}"
                               f"\n{p.stderr[-3000:]}")
        os.rename(tmp, out)
    return out


def base_model() -> Path:
    """The tiny base model `looplift up` and `looplift demo` build and serve by default (`trainer build-base`)."""
    return built_model("base", [str(BIN / "trainer"), "build-base"])


def family_model(family: str, steps: int | None = None) -> Path:
    """A model of `family` as `looplift model build` writes it (`steps` None: its default training)."""
    argv = [str(BIN / "looplift"), "model", "build", "--family", family]
    if steps is not None:
        argv += ["--steps", str(steps)]
    return built_model(f"family-{family}", argv)
