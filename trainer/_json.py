"""Configs and results as plain JSON values, one way for every file the trainer writes.

Dataclasses become dicts (an `admin_token` field is left out: secrets are never written), paths become
strings, lists and tuples lists. Nothing else is converted; `json.dumps` reports what it cannot write.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


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
