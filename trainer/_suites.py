"""Loading an app's eval suite from what `--eval` / `[trainer].eval` says.

Two forms:

- `PKG.MODULE:ATTR`: an `sdk.EvalSuite`, or a zero-argument callable returning one (so a suite can
  start what it needs, e.g. a sandbox pool, only when a job uses it). The demo's is
  `envs:arithmetic_suite`.
- a path to a prompt-suite JSONL file (`*.jsonl`, e.g. from `trainer suite from-holdout`): scripted
  prompts with a checker, for apps without a Python environment (`_prompt_suite`).

Every way this can go wrong is a `SuiteError` with one line that says what to fix: a module that does
not import, an attribute that is not a suite, a suite without tasks (or with duplicate task ids, which
`sdk.EvalSuite` refuses: the gate pairs outcomes by task id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from sdk import EvalSuite
from sdk.infra import import_object

from .errors import SuiteError

NO_SUITE_HINT = ("pass --eval PKG.MODULE:ATTR (an sdk.EvalSuite or a function returning one) or --eval SUITE.jsonl, "
                 "or set `eval` under [trainer] in looplift.toml; the demo task's suite is `envs:arithmetic_suite`")


def is_suite_file(spec: str) -> bool:
    """Whether `spec` names a prompt-suite file rather than an import path."""
    return spec.endswith((".jsonl", ".json")) or "/" in spec or Path(spec).is_file()


def load_suite(spec: Optional[str]) -> EvalSuite:
    """The eval suite `spec` names (see the module docstring), checked to be usable."""
    if not spec:
        raise SuiteError(f"no eval suite given: {NO_SUITE_HINT}")
    if is_suite_file(spec):
        from ._prompt_suite import load_prompt_suite

        return check_suite(load_prompt_suite(Path(spec)), spec)
    obj: Any = import_object(spec, what="--eval", error=SuiteError)
    if not isinstance(obj, EvalSuite) and callable(obj):
        try:
            obj = obj()
        except TypeError as e:
            raise SuiteError(f"--eval {spec}: calling it with no arguments failed ({e}); point at an EvalSuite or at "
                             "a function that takes no arguments and returns one") from None
        except Exception as e:  # e.g. sdk.EvalSuite refusing a suite without tasks
            raise SuiteError(f"--eval {spec}: building the suite failed: {e}") from None
    return check_suite(obj, spec)


def check_suite(suite: Any, spec: str) -> EvalSuite:
    """`suite` if it is an `EvalSuite` the gate can use, else a `SuiteError` naming `spec` and the fix."""
    if not isinstance(suite, EvalSuite):
        raise SuiteError(f"--eval {spec} is a {type(suite).__name__}, not an sdk.EvalSuite (or a function "
                         "returning one)")
    if len(suite.tasks) == 0:
        raise SuiteError(f"eval suite {suite.name!r} from {spec} has no tasks; give it at least one sdk.Task (the gate "
                         "needs held-out tasks to compare versions on)")
    return suite  # unique task ids: sdk.EvalSuite checks them itself
