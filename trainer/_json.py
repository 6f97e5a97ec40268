"""JSON in and out of the trainer: configs and results as plain JSON values, one way for every file the
trainer writes, and one reader for the JSONL files it reads (exports, prompt suites).

Dataclasses become dicts (an `admin_token` field is left out: secrets are never written), paths become
strings, lists and tuples lists. Nothing else is converted; `json.dumps` reports what it cannot write.
No torch here: the prompt-suite loader runs where torch is not imported.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Iterator


def jsonable(obj: Any) -> Any:
    """`obj` with dataclasses, paths and containers of them turned into JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(obj).items() if k != "admin_token"}
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def jsonl_objects(path: Path, error: Callable[[str], Exception], what: str = "JSON") -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line of `path`; a line that does not parse raises
    `error("<path>:<line>: not <what> (<why>)")`."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise error(f"{path}:{n}: not {what} ({e})") from None
            yield n, obj
