"""Prompt-only eval suites for black-box apps: scripted prompts, a checker, no Python environment.

An app that talks to the gateway with a plain OpenAI client has no `sdk.Environment` to replay, but it
has conversations and their verified answers. A prompt suite replays the user side of a conversation
(one or more scripted turns, sent in order whatever the model answers) and a checker judges the
model's last reply against the expected one. It is an ordinary `sdk.EvalSuite`
(`ScriptedPromptEnv` + `CheckerVerifier`), so the gate treats it like any other suite.

Checkers (per suite, or per task):

- `exact`: the reply equals the expected answer (surrounding whitespace ignored).
- `regex:PAT`: with a capture group, group 1 of PAT in the reply equals group 1 in the expected answer;
  without one, PAT matches the reply (`re.search`).
- `json:FIELD`: the reply parses as JSON (code fences and text around one object are tolerated) and its
  FIELD (dotted: `a.b.0`) equals the expected answer's.
- `PKG.MOD:FN`: `FN(reply: str, expected: str or None)` returns True (or a number >= 1).

The JSONL file (`trainer suite from-holdout` writes it; hand-written ones work the same): an optional
first line `{"suite": {"name", "checker", "max_tokens", "temperature", "seed", "system_prompt",
"holdout"}}`, then one task per line: `{"id", "turns": ["user message", ...], "expected", "checker"?,
"slice"?}`. `holdout` is the `collector export --holdout` fraction the tasks came from: the retrain job
exports with the same fraction, so these tasks never become training data.

Deliberately approximate: a multi-turn replay sends the recorded later turns even when the model's
earlier answer differs from the recorded one (a black box cannot be re-run), and tool results in the
recorded conversation are replayed as user turns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import sdk
from sdk import Budget, EvalSuite, Outcome, StepResult, Task, Trajectory
from sdk.errors import ConfigError as SDKConfigError
from sdk.infra import import_object

from . import _defaults as D
from ._json import jsonl_objects
from .errors import SuiteError

Check = Callable[[str, Optional[str]], bool]


# ---- checkers ------------------------------------------------------------------------------------
def _json_of(text: str) -> Any:
    s = text.strip()
    fence = re.search(r"```(?:json)?\s*\n(.*?)```", s, re.DOTALL)
    if fence:
        s = fence.group(1).strip()
    try:
        return json.loads(s)
    except ValueError:
        start, end = s.find("{"), s.rfind("}")
        if start < 0 or end <= start:
            raise
        return json.loads(s[start:end + 1])


_MISSING = object()


def _field(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _json_field(path: str) -> Check:
    def check(reply: str, expected: Optional[str]) -> bool:
        try:
            got = _field(_json_of(reply), path)
        except ValueError:
            return False
        return got is not _MISSING and got == _field(_json_of(expected or ""), path)

    return check


def _regex(pattern: re.Pattern[str]) -> Check:
    def check(reply: str, expected: Optional[str]) -> bool:
        m = pattern.search(reply)
        if m is None:
            return False
        if pattern.groups == 0:
            return True
        want = pattern.search(expected or "")
        return want is not None and m.group(1) == want.group(1)

    return check


def _function(fn: Callable[..., Any]) -> Check:
    def check(reply: str, expected: Optional[str]) -> bool:
        result = fn(reply, expected)
        return bool(result >= 1) if isinstance(result, (int, float)) and not isinstance(result, bool) else bool(result)

    return check


def parse_checker(spec: str) -> Check:
    """The check function `spec` names (see the module docstring); a `SuiteError` saying what to fix."""
    if spec == "exact":
        return lambda reply, expected: reply.strip() == (expected or "").strip()
    if spec.startswith("regex:"):
        try:
            return _regex(re.compile(spec[len("regex:"):]))
        except re.error as e:
            raise SuiteError(f"checker {spec!r}: the pattern does not compile ({e})") from None
    if spec.startswith("json:"):
        if not spec[len("json:"):]:
            raise SuiteError("checker 'json:' needs a field, e.g. json:answer or json:result.total")
        return _json_field(spec[len("json:"):])
    if ":" in spec:
        fn = import_object(spec, what="checker", error=SuiteError)
        if not callable(fn):
            raise SuiteError(f"checker {spec} is a {type(fn).__name__}, not a function (reply, expected) -> bool")
        return _function(fn)
    raise SuiteError(f"unknown checker {spec!r}; use exact, regex:PATTERN, json:FIELD or PKG.MODULE:FUNCTION")


def _expected_ok(checker: str, expected: Optional[str]) -> Optional[str]:
    """Why `expected` cannot serve `checker` (None when it can)."""
    if checker == "exact" and expected is None:
        return "an exact checker needs an expected answer"
    if checker.startswith("json:"):
        try:
            if _field(_json_of(expected or ""), checker[len("json:"):]) is _MISSING:
                return f"the expected answer has no field {checker[len('json:'):]!r}"
        except ValueError:
            return "the expected answer is not JSON"
    if checker.startswith("regex:"):
        pattern = re.compile(checker[len("regex:"):])
        if pattern.groups and pattern.search(expected or "") is None:
            return "the pattern does not match the expected answer"
    return None


# ---- the environment and the verifier ---------------------------------------------------------------
class ScriptedPromptEnv:
    """`sdk.Environment` that plays a task's scripted user turns (`task.data["turns"]`) in order; the
    episode ends after the model answered the last one."""

    def __init__(self) -> None:
        self._turns: list[str] = []
        self._i = 0

    def reset(self, task: Task) -> str:
        self._turns = [str(t) for t in task.data.get("turns") or [task.prompt]]
        self._i = 0
        return self._turns[0]

    def step(self, action: str) -> StepResult:
        self._i += 1
        if self._i < len(self._turns):
            return StepResult(observation=self._turns[self._i])
        return StepResult(observation="", done=True)


@dataclass
class CheckerVerifier:
    """`sdk.Verifier`: the task's checker (`task.data["checker"]`, else `default`) on the last reply."""

    default: str = "exact"

    def __post_init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def check_for(self, spec: str) -> Check:
        """The (cached) check function for `spec`."""
        if spec not in self._checks:
            self._checks[spec] = parse_checker(spec)
        return self._checks[spec]

    def verify(self, task: Task, trajectory: Trajectory) -> Outcome:
        last = next((m for m in reversed(trajectory.messages) if m.role == "assistant"), None)
        reply = "" if last is None else (last.content or _tool_calls_text(last.tool_calls))
        spec = str(task.data.get("checker") or self.default)
        expected = task.data.get("expected")
        ok = self.check_for(spec)(reply, None if expected is None else str(expected))
        answered = len(trajectory.steps) >= len(task.data.get("turns") or [task.prompt])
        success = ok and answered
        return Outcome(success=success, reward=float(success),
                       details={"checker": spec, "expected": expected, "reply": reply[:500], "answered_all": answered})


def _tool_calls_text(calls: Any) -> str:
    return json.dumps([c.model_dump() for c in calls]) if calls else ""


# ---- building a suite ------------------------------------------------------------------------------------
def prompt_suite(
    cases: Iterable[Mapping[str, Any]],
    *,
    name: str = "prompts",
    checker: str = "exact",
    max_tokens: int = D.PROMPT_MAX_TOKENS,
    temperature: float = 1.0,
    seed: int = D.EVAL_SEED,
    system_prompt: Optional[str] = None,
    where: str = "prompt suite",
) -> EvalSuite:
    """An `sdk.EvalSuite` from cases `{"id", "turns" | "prompt", "expected", "checker"?, "slice"?}`.

    Every checker is resolved now (a bad one fails here, not mid-eval); `where` prefixes error messages."""
    verifier = CheckerVerifier(default=checker)
    tasks: list[Task] = []
    for i, case in enumerate(cases, 1):
        turns = case.get("turns") if "turns" in case else [case.get("prompt")]
        tid = case.get("id")
        if not isinstance(tid, str) or not tid:
            raise SuiteError(f"{where}: case {i} has no string `id`")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise SuiteError(f"{where}: case {tid!r} needs `turns`, a non-empty list of non-empty strings")
        spec = str(case.get("checker") or checker)
        verifier.check_for(spec)
        expected = case.get("expected")
        if expected is not None and not isinstance(expected, str):
            expected = json.dumps(expected)
        why = _expected_ok(spec, expected)
        if why is not None:
            raise SuiteError(f"{where}: case {tid!r}: {why}")
        data: dict[str, Any] = {"turns": turns, "expected": expected, "checker": spec}
        if case.get("slice") is not None:
            data["slice"] = str(case["slice"])
        tasks.append(Task(id=tid, prompt=turns[0], data=data))
    if not tasks:
        raise SuiteError(f"{where}: the suite has no tasks; add at least one line {{\"id\", \"turns\", \"expected\"}}")
    steps = max(len(t.data["turns"]) for t in tasks)
    try:
        return EvalSuite(name=name, tasks=tasks, env_factory=ScriptedPromptEnv, verifier=verifier,
                         budget=Budget(max_steps=steps),
                         sampling=sdk.Sampling(max_tokens=max_tokens, temperature=temperature, seed=seed),
                         system_prompt=system_prompt)
    except SDKConfigError as e:  # e.g. duplicate task ids
        raise SuiteError(f"{where}: {e}") from None


HEADER_KEYS = {"name", "checker", "max_tokens", "temperature", "seed", "system_prompt", "holdout", "source",
               "built_from"}


def read_suite_file(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, cases) of a prompt-suite JSONL file; errors name the file and line."""
    if not path.is_file():
        raise SuiteError(f"--eval {path}: no such file; build one with `trainer suite from-holdout HOLDOUT.jsonl "
                         f"--out {path}` or give an import path PKG.MODULE:ATTR")
    header: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []
    for n, obj in jsonl_objects(path, SuiteError):
        if not isinstance(obj, dict):
            raise SuiteError(f"{path}:{n}: expected a JSON object")
        if "suite" in obj and not cases and not header:
            header = obj["suite"] if isinstance(obj["suite"], dict) else {}
            unknown = set(header) - HEADER_KEYS
            if unknown:
                raise SuiteError(f"{path}:{n}: unknown suite key(s) {', '.join(sorted(unknown))}; "
                                 f"known: {', '.join(sorted(HEADER_KEYS))}")
            continue
        cases.append(obj)
    return header, cases


def load_prompt_suite(path: Path) -> EvalSuite:
    """The prompt suite in the JSONL file `path` (see the module docstring)."""
    header, cases = read_suite_file(path)
    return prompt_suite(cases, name=str(header.get("name") or path.stem), checker=str(header.get("checker") or "exact"),
                        max_tokens=int(header.get("max_tokens") or D.PROMPT_MAX_TOKENS),
                        temperature=float(header.get("temperature", 1.0)), seed=int(header.get("seed", D.EVAL_SEED)),
                        system_prompt=header.get("system_prompt"), where=str(path))


def suite_holdout(path: Path) -> Optional[float]:
    """The holdout fraction a prompt-suite file declares (None when it declares none or is not a file)."""
    try:
        header, _ = read_suite_file(path)
    except SuiteError:
        return None
    value = header.get("holdout")
    return float(value) if value is not None else None
