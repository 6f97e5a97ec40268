"""`PKG.MODULE:ATTR` -> the object, with one-line errors that say what to fix.

Everything looplift takes by import path goes through here: eval suites (`--eval`), train steps
(`--algo`), prompt-suite checkers, `looplift env try --policy`, and the task-family registry.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ..errors import ConfigError


def import_object(spec: str, *, what: str = "import path", error: type[Exception] = ConfigError,
                  from_cwd: bool = True) -> Any:
    """The object `spec` names: `"pkg.module:attr"`, where `attr` may be dotted (`"pkg.mod:Class.method"`).

    Every failure raises `error` (default `sdk.errors.ConfigError`) with one line that starts with
    `what` and the spec and says what to fix: a spec without `:` ("is not an import path; write it as
    PKG.MODULE:ATTR"), a module that does not exist ("cannot import module 'x'"), a module that raised
    while importing ("importing 'x' failed: ...", e.g. its own missing dependency), an attribute that
    does not exist ("module 'x' has no attribute 'y'").

    `from_cwd` (the default) puts the current directory on `sys.path` first, as `python -m` does, so an
    app's `evals.py` beside its `looplift.toml` is found without setting PYTHONPATH."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise error(f"{what} {spec!r} is not an import path; write it as PKG.MODULE:ATTR (e.g. myapp.evals:suite)")
    if from_cwd:
        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if not _names(module_name, e.name):  # the module itself imported, and one of its imports is missing
            raise error(f"{what} {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
        raise error(f"{what} {spec!r}: cannot import module {module_name!r} ({e}); check the spelling and that it "
                    "is on PYTHONPATH or in the current directory") from None
    except Exception as e:  # the module itself raised while importing
        raise error(f"{what} {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _names(module: str, missing: str | None) -> bool:
    """Whether `missing` (a ModuleNotFoundError's name) is `module` or one of its parent packages."""
    return missing is None or module == missing or module.startswith(missing + ".")
