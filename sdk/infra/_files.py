"""Atomic writes: a reader sees the old content or the new, never a half-written file, and a crash at
any moment leaves no partial file under the final name.

Every helper writes to a temporary name in the destination's own directory (same filesystem, so the
rename is atomic), fsyncs the data, renames over the final name, then fsyncs the directory so the rename
itself survives a power cut. On any exception the temporary is removed and the old content is kept.

Deliberately not here: locking (two writers of one path race; the last rename wins, whole) and
cross-filesystem moves.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # e.g. a filesystem that cannot open directories: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_open(path: PathLike, mode: str = "w", *, perms: int = 0o644) -> Iterator[IO[Any]]:
    """`with atomic_open(path, "w"|"wb") as f:` — write; the file appears under `path` only when the block
    ends without an exception. `perms` are the final file's permission bits (e.g. 0o600 for secrets)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', not {mode!r}")
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, perms)
        f: IO[Any] = os.fdopen(fd, mode, encoding="utf-8") if mode == "w" else os.fdopen(fd, "wb")
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(final.parent)


def atomic_write(path: PathLike, data: Union[str, bytes], *, perms: int = 0o644) -> Path:
    """Write `data` (text as UTF-8, or bytes) to `path` atomically; returns the path."""
    with atomic_open(path, "wb", perms=perms) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def atomic_write_json(path: PathLike, obj: Any, *, indent: Optional[int] = 2, perms: int = 0o644) -> Path:
    """`json.dumps(obj)` written atomically to `path` (non-ASCII kept as is)."""
    return atomic_write(path, json.dumps(obj, indent=indent, ensure_ascii=False), perms=perms)


@contextmanager
def atomic_dir(path: PathLike, *, replace: bool = True) -> Iterator[Path]:
    """`with atomic_dir(out) as tmp:` — fill the directory `tmp`; when the block ends without an exception
    it becomes `out`. With `replace=True` an existing `out` is replaced (moved aside, then deleted, so
    `out` never holds a mix of old and new files); with `replace=False` an `out` that appeared meanwhile
    (another process finished first) is kept and the new one is dropped."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        for f in tmp.rglob("*"):  # the files' data reaches the disk before the directory's name does
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if final.exists():
            if not replace:
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".old"))
            os.replace(final, old / "d")
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(tmp, final)
            except OSError:
                if replace or not final.exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # lost a race with another writer: keep theirs
                return
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(final.parent)
