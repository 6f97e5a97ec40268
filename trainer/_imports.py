"""`PKG.MODULE:ATTR` -> the object, with one-line errors that say what to fix.

Used for everything the trainer takes by import path: `--eval` suites, `--algo` train steps and
prompt-suite checker functions. The current directory is importable (as with `python -m`), so an
app's `evals.py` next to its `looplift.toml` is found without setting PYTHONPATH.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def import_object(spec: str, *, what: str, error: type[Exception]) -> Any:
    """Import `spec` ("pkg.module:attr", attr may be dotted); raise `error` naming `what` on any failure."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise error(f"{what} {spec!r} is not an import path; write it as PKG.MODULE:ATTR (e.g. myapp.evals:suite)")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise error(f"{what} {spec}: cannot import module {module_name!r} ({e}); check the spelling and that it is "
                    "on PYTHONPATH or in the current directory") from None
    except Exception as e:  # the module itself raised while importing
        raise error(f"{what} {spec}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"{what} {spec}: module {module_name!r} has no attribute {attr!r}") from None
    return obj
