"""Reuse a version's gate evaluation when it is gated again on the same suite with the same seed.

Every retrain job evaluates the candidate and the serving version. The serving version is usually last
run's candidate, evaluated then on exactly these tasks with exactly these per-task seeds; evaluating it
again costs as much as the candidate (half of the gate) to learn what is already known. Each result is
kept under `<runs>/eval-cache/<key>.json`, keyed by what decides it: the version's name and adapter
directory (or the base model for version 0), the suite's name, task ids, budget, sampling, system prompt,
tool choice and the classes of its environment factory and verifier, and the seed.

Only a clean evaluation is kept: one with a task whose episode kept erroring (`EvalResult.errored`) is
never written, and an entry that records errors (written before this rule) is never reused, so a
transient crash is measured again by the next gate instead of blocking (or deciding) every later one.

Deliberately not here: expiry. A suite that keeps its name, tasks and classes but changes what its
verifier accepts must change its name (or clear the cache directory) to be re-measured.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from sdk import EvalSuite
from sdk.infra import atomic_write_json

from ._eval import EvalResult
from ._json import jsonable

DIR = "eval-cache"
"""The cache's folder inside the runs folder (`list_runs` skips it: it is not a run)."""


def cache_key(version: str, weights: str, suite: EvalSuite, seed: int) -> str:
    """sha256 over everything that decides a version's outcomes on `suite` (see the module docstring)."""
    what = {"version": version, "weights": weights, "suite": suite.name, "tasks": [t.id for t in suite.tasks],
            "budget": jsonable(suite.budget), "sampling": jsonable(suite.sampling), "system": suite.system_prompt,
            "tool_choice": suite.tool_choice, "seed": seed,
            "classes": [type(suite.env_factory).__qualname__, type(suite.verifier).__qualname__]}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def load(runs_dir: Path, key: str) -> Optional[EvalResult]:
    """The cached result for `key`, or None: none kept, an unreadable entry, or one that records errors (all
    simply measured again)."""
    try:
        raw: dict[str, Any] = json.loads((runs_dir / DIR / f"{key}.json").read_text())
        if raw.get("errors") or raw.get("errored"):  # "errors": the count entries written before the rule kept
            return None
        return EvalResult(version=raw["version"], suite=raw["suite"], outcomes=raw["outcomes"], slices=raw["slices"],
                          seed=raw["seed"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save(runs_dir: Path, key: str, result: EvalResult) -> bool:
    """Keep `result` for `key` (atomically: a reader never sees half an entry); False, keeping nothing, when
    some task of it errored."""
    if result.errored:
        return False
    atomic_write_json(runs_dir / DIR / f"{key}.json", jsonable(result), indent=None)
    return True
