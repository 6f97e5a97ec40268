"""The task families this package ships, by name: `looplift env list` / `env try`, eval suites and
bench/families.py read it.

Each entry is a zero-argument loader, so listing the families imports none of them, and loading one
imports only its module: a family whose optional dependencies are missing (reportlab and pdfplumber
for extraction, Blender for modeling) fails alone, with its own error, and never breaks another. A
family is listed when its module is present in this install (`importlib.util.find_spec`, which does
not import it).

To add a family: give its module a zero-argument callable returning an `sdk.EnvFamily`, and add one
line to `_FAMILIES`. This is the one registry; keep it that way.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdk import EnvFamily, Policy
from sdk.infra import import_object

__all__ = ["build_coding_tasks", "env_families", "extraction_family", "family_sources", "careless_extraction"]

#: family name -> "module:callable" (the callable takes no arguments and returns an `EnvFamily`).
_FAMILIES: dict[str, str] = {
    "arithmetic": "envs._arithmetic_suite:family",
    "coding": "envs._coding:family",
    "extraction": "envs._extraction:family",
    "modeling": "envs._modeling:family",
}


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _loader(target: str) -> Callable[[], EnvFamily]:
    module = target.partition(":")[0]

    def load() -> EnvFamily:
        # Not from the current directory: a family is this package's module, never the user's file.
        fam = import_object(target, what="task family", from_cwd=False)()
        if not isinstance(fam, EnvFamily):
            raise TypeError(f"{target} returned {type(fam).__name__}, not an sdk.EnvFamily")
        return fam

    load.__name__ = f"load_{module.rsplit('.', 1)[-1].lstrip('_')}"
    load.__doc__ = f"Import {module} and return its family ({target})."
    return load


def env_families() -> dict[str, Callable[[], EnvFamily]]:
    """The task families in this install: name -> a zero-argument loader returning the `sdk.EnvFamily`
    (importing the family's module only then). Call the family's `close` when done with it."""
    return {name: _loader(target) for name, target in _FAMILIES.items() if _present(target.partition(":")[0])}


def build_coding_tasks(**kwargs: Any) -> dict[str, Any]:
    """Generate and verify the coding family's tasks and write its manifest (see `scripts/build_coding_tasks.py`
    for the options). Imports the coding family only when called, like its loader."""
    from ._coding import build_tasks

    return build_tasks(**kwargs)


def family_sources(name: str) -> list[Path]:
    """The source files of family `name`'s package (what a model trained on its episodes depends on: tasks, prompts,
    tools, verifier, policies), sorted; a `KeyError` for an unknown family."""
    spec = importlib.util.find_spec(_FAMILIES[name].partition(":")[0])
    if spec is None or spec.origin is None:
        raise KeyError(f"family {name!r} is not installed")
    origin = Path(spec.origin)
    return sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]


def extraction_family(level: int = 3) -> EnvFamily:
    """The extraction family at `level` (1: the income statement, 2: the statements, 3: the whole report; see
    `envs._extraction`), imported only when called (it needs reportlab and pdfplumber)."""
    from ._extraction import family

    return family(level=level)


def careless_extraction(rate: float, seed: int = 0) -> Policy:
    """The extraction oracle with one careless reader's mistake on a share `rate` of the tasks (the extraction base
    model's demonstrations: `trainer.build_extraction_model`)."""
    from ._extraction import careless

    return careless(rate, seed)
