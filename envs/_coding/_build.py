"""The build step of the coding family: generate every candidate bug, keep the verified ones.

For each HumanEval problem:
  1. the canonical solution must pass the full HumanEval tests through the same judge the verifier uses
     (`_hidden.run_hidden`), and every self-contained assert as a visible unittest (else the problem,
     or the assert, is dropped);
  2. hidden cases are generated (`_generate_cases`): argument tuples drawn from the literal inputs of
     the problem's `check` (recombined across examples, perturbed in type: ints and floats within or
     near the range seen, strings and lists shuffled, shortened, lengthened; three problems without literal
     inputs draw theirs from a small table), seeded by `seed` and the problem, never equal to an input
     of `check`; the expected value of each is what the canonical solution returns, computed *in the
     build's sandbox* (`_REFERENCE`: 0.25 s of CPU a call — CPU, not wall time, so a loaded machine builds
     the same cases — run twice, plain data only, else the input is discarded). At least
     `max(CASES_MIN, n + 1)` of them (n: the self-contained asserts), so the hidden set outnumbers any
     task's visible one; the canonical solution must pass them through the judge;
  3. for each injector, its sites are tried in an order shuffled by `seed` (stable per problem and
     injector) until `per_pair` of them give a bug that *fails* the HumanEval tests without timing out
     (a bug that passes is an equivalent mutant; one that hangs would make every episode on it slow)
     and fails the hidden test, which is `check` without every assert a kept task shows plus the
     generated cases (`_humaneval.hidden_test`; a bug only the visible asserts catch is dropped: a
     policy that answers the visible inputs from a table would pass it). Once the problem's tasks are
     chosen, each is checked again against the final hidden test (later tasks may show more asserts);
  4. the fix is checked structurally: applying `fix_old -> fix_new` to the buggy module gives back the
     canonical module byte for byte, which passed in steps 1 and 2;
  5. the visible tests are the first half of the self-contained asserts plus, when none of those
     fails on the bug, the first one that does; whether the visible file shows the bug is recorded.

The result is the manifest `tasks.json` (ids, sites, hashes, each problem's hidden test as excluded
assert numbers and generated cases, counts of what was rejected and why, the held-out problems, the
wall time). It runs on the local backend by default: the code run here is the package's own canonical
solutions and their mutants, not model output.

Deliberately not here: checking that a generated input is inside the docstring's domain. The cases pin
the canonical solution's answer on inputs near the examples; a rewrite that differs from it outside
the documented domain can fail them (a one-line repair restores the canonical code and cannot).
"""

from __future__ import annotations

import ast
import copy
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from sandboxes import Sandbox, SandboxConfig, make_sandbox
from ._bugs import INJECTORS, inject, sites
from ._env import SOLUTION, VISIBLE_TESTS, sha256
from ._hidden import run_hidden
from ._humaneval import Problem, hidden_test, humaneval_problems, literal_calls, visible_asserts, visible_test_file
from ._tasks import HELD_OUT_SEED, held_out_problems

__all__ = ["build_manifest"]

MANIFEST_VERSION = 2
#: Generated hidden cases per problem, at least (more when the problem has more asserts).
CASES_MIN = 10
_MAX_CASE_CHARS = 2000
_CASES_MARK = "LOOPLIFT-CASES"

# Runs in the sandbox: the canonical module on each input (literal source); prints one marked JSON line.
_REFERENCE = r'''
import ast, copy, json, math, signal, sys, types

spec = json.loads(sys.stdin.read())
mod = types.ModuleType("solution")
exec(compile(spec["source"], "solution.py", "exec"), mod.__dict__)
fn, prepare = getattr(mod, spec["entry_point"]), spec["prepare"] and getattr(mod, spec["prepare"])


def plain(v):
    t = type(v)
    if t in (type(None), bool, int, str):
        return True
    if t is float:
        return math.isfinite(v)
    if t in (list, tuple):
        return all(plain(x) for x in v)
    if t is dict:
        return all(plain(k) and plain(x) for k, x in v.items())
    return False


def slow(*_):
    raise TimeoutError


signal.signal(signal.SIGPROF, slow)
out = []
for text in spec["inputs"]:
    try:
        args = ast.literal_eval(text)
        if prepare:
            args = (prepare(*args),)
        got = []
        for _ in range(2):
            signal.setitimer(signal.ITIMER_PROF, spec["call_timeout"])  # CPU seconds: the same under load
            try:
                v = fn(*copy.deepcopy(args))
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            got.append(repr(v) if plain(v) else None)
        ok = got[0] is not None and got[0] == got[1] and plain(args) and repr(ast.literal_eval(got[0])) == got[0]
        out.append([repr(args), got[0] if ok else None])
    except BaseException:
        out.append([text, None])
sys.stdout.write("\n%s %s\n" % (spec["mark"], json.dumps(out)))
'''


def _word(rng: random.Random) -> tuple[Any, ...]:
    return ("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(10, 20))),)


def _coeffs(rng: random.Random) -> tuple[Any, ...]:
    return ([rng.choice([c for c in range(-10, 11) if c]) for _ in range(2 * rng.randint(1, 4))],)


# Problems whose `check` has no literal input: how to draw one, and the prompt function the input goes
# through first (the visible file of these runs the whole `check`, on inputs drawn by its own rules).
_DRAWN: dict[str, tuple[Callable[[random.Random], tuple[Any, ...]], Optional[str]]] = {
    "HumanEval/32": (_coeffs, None), "HumanEval/38": (_word, "encode_cyclic"), "HumanEval/50": (_word, "encode_shift")}
# Problems with more than one right answer: the property a case asserts instead of equality ({a}: the arguments).
_PROPERTY = {"HumanEval/32": "assert abs(poly({a}, candidate({a}))) < 1e-4"}
_UT_LINE = re.compile(r"^(test_\w+) \(.*?\) \.\.\. (ok|FAIL|ERROR)", re.MULTILINE)


def _visible_results(sb: Sandbox, p: Problem, source: str, n_asserts: int) -> Optional[dict[str, bool]]:
    """test name -> passed, running every self-contained assert (None when the run timed out)."""
    sb.reset()
    sb.write_file(SOLUTION, source)
    sb.write_file(VISIBLE_TESTS, visible_test_file(p, list(range(n_asserts))))
    r = sb.exec(["python3", "-m", "unittest", "-v", "test_solution"], timeout=15)
    if r.timed_out:
        return None
    return {name: status == "ok" for name, status in _UT_LINE.findall(r.stdout + r.stderr)}


def _choose_visible(results: dict[str, bool], n: int) -> tuple[list[int], bool]:
    chosen = list(range((n + 1) // 2))
    failing = [i for i in range(n) if not results.get(f"test_{i + 1:02d}", False)]
    if not any(i in failing for i in chosen) and failing:
        chosen.append(failing[0])
    return sorted(chosen), any(i in failing for i in chosen)


def _mutate(v: Any, pool: list[Any], rng: random.Random) -> Any:
    """A value like `v`: another example's (`pool`: the values seen at this position), or `v` changed in type."""
    if len(pool) > 1 and rng.random() < 0.3:
        return copy.deepcopy(rng.choice(pool))
    t = type(v)
    if t is bool:
        return not v
    if t in (int, float):
        seen = [x for x in pool if type(x) in (int, float)] or [v]
        lo, hi = min(seen), max(seen)
        if t is int:
            step = rng.choice((-2, -1, 1, 2)) * rng.choice((1, 1, 4))
            out: Any = rng.randint(int(lo), int(hi)) if hi > lo and rng.random() < 0.5 else v + step
        else:
            out = round(rng.uniform(lo, hi) if hi > lo and rng.random() < 0.5 else v + rng.uniform(-1.5, 1.5), 2)
        return max(out, type(out)(lo)) if lo >= 0 else out  # stay non-negative when every example is
    if t is str:
        words = " " in v.strip()  # edit a sentence word by word, anything else character by character
        seen_parts = [part for x in pool if type(x) is str for part in (x.split(" ") if words else x)]
        parts: list[Any] = v.split(" ") if words else list(v)
        return (" " if words else "").join(_edit(parts, seen_parts or parts or ["a"], rng))
    if t is list:
        return _edit(v, [e for x in pool if type(x) is list for e in x], rng)
    if t is tuple and v:
        i = rng.randrange(len(v))
        return v[:i] + (_mutate(v[i], [x[i] for x in pool if type(x) is tuple and len(x) == len(v)], rng),) + v[i + 1:]
    if t is dict and v:
        key, new = rng.choice(list(v)), dict(v)
        if len(v) > 1 and rng.random() < 0.5:
            del new[key]
        else:
            new[key] = _mutate(v[key], list(v.values()), rng)
        return new
    return v


def _edit(items: list[Any], pool: list[Any], rng: random.Random) -> list[Any]:
    """`items` shuffled (a grid: its cells), or with one item dropped, repeated or changed (`pool`: items seen)."""
    out = copy.deepcopy(items)
    if not out:
        return [copy.deepcopy(rng.choice(pool))] if pool else []
    op, i = rng.randrange(4), rng.randrange(len(out))
    if op == 0 and out and all(type(row) is list for row in out):
        cells = [c for row in out for c in row]
        rng.shuffle(cells)
        return [[cells.pop() for _ in row] for row in out]
    if op == 0:
        rng.shuffle(out)
    elif op == 1:
        del out[i]
    elif op == 2:
        out.insert(rng.randrange(len(out) + 1), copy.deepcopy(out[i]))
    else:
        out[i] = _mutate(out[i], pool or [out[i]], rng)
    return out


def _draw_inputs(p: Problem, rng: random.Random, want: int) -> list[tuple[Any, ...]]:
    """Up to `want` distinct argument tuples, none equal to an input `check` shows."""
    examples = literal_calls(p.humaneval_test) + literal_calls(p.humaneval_test, p.entry_point)
    seen = {repr(e) for e in examples}
    drawn: list[tuple[Any, ...]] = []
    for _ in range(want * 50):
        if len(drawn) >= want or not (examples or p.id in _DRAWN):
            break
        if p.id in _DRAWN:
            args = _DRAWN[p.id][0](rng)
        else:
            base = rng.choice(examples)
            if not base:
                break
            pools = [[e[i] for e in examples if len(e) == len(base)] for i in range(len(base))]
            change = [rng.random() < 0.5 for _ in base] if len(base) > 1 else [True]
            change[rng.randrange(len(base))] = True
            args = tuple(_mutate(v, pools[i], rng) if change[i] else copy.deepcopy(v) for i, v in enumerate(base))
        key = repr(args)
        if key not in seen and len(key) <= _MAX_CASE_CHARS:
            seen.add(key)
            drawn.append(args)
    return drawn


def _has_float(v: Any) -> bool:
    if type(v) in (list, tuple):
        return any(_has_float(x) for x in v)
    if type(v) is dict:
        return any(_has_float(x) for x in v.values())
    return type(v) is float


def _render(p: Problem, args_src: str, expected_src: str) -> str:
    """One hidden assert: the property (`_PROPERTY`) or `candidate(args) == expected` (floats to 1e-6)."""
    args = ", ".join(repr(a) for a in ast.literal_eval(args_src))
    if p.id in _PROPERTY:
        return _PROPERTY[p.id].format(a=args)
    if _has_float(ast.literal_eval(expected_src)):
        return f"assert _looplift_same(candidate({args}), {expected_src})"
    return f"assert candidate({args}) == {expected_src}"


def _generate_cases(p: Problem, seed: int, sb: Sandbox, want: int) -> list[str]:
    """`want` hidden asserts (fewer when fewer inputs are found), the expected values computed by the
    canonical solution in `sb` (see the module docstring)."""
    inputs = _draw_inputs(p, random.Random(f"{seed}:{p.id}:cases"), 3 * want)
    spec = {"source": p.source, "entry_point": p.entry_point, "prepare": _DRAWN.get(p.id, (None, None))[1],
            "inputs": [repr(a) for a in inputs], "call_timeout": 0.25, "mark": _CASES_MARK}
    sb.reset()
    r = sb.exec(["python3", "-I", "-S", "-c", _REFERENCE], stdin=json.dumps(spec), timeout=120)
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(_CASES_MARK + " ")), None)
    if line is None:
        return []
    cases = [_render(p, args, out) for args, out in json.loads(line[len(_CASES_MARK) + 1:]) if out is not None]
    return [c for c in cases if len(c) <= _MAX_CASE_CHARS][:want]


def _exclusions(p: Problem, shown: set[int]) -> list[int]:
    """The self-contained asserts a hidden test leaves out: those shown, and those calling with an input they show."""
    asserts = visible_asserts(p)
    shown_inputs = {repr(a) for i in shown for a in literal_calls(asserts[i]) + literal_calls(asserts[i], p.entry_point)}
    return sorted(i for i, src in enumerate(asserts) if i in shown or any(
        repr(a) in shown_inputs for a in literal_calls(src) + literal_calls(src, p.entry_point)))


def _hidden_verdict(sb: Sandbox, p: Problem, source: str, test: str) -> str:
    """"pass", "fail" or "timeout": `source` against `test` through the judge, in a reset sandbox."""
    sb.reset()
    r = run_hidden(sb, source, prompt=p.prompt, test=test, entry_point=p.entry_point)
    return "timeout" if r.timed_out or "timed out" in r.reason else "pass" if r.passed else "fail"


def _build_problem(p: Problem, seed: int, per_pair: int,
                   sb: Sandbox) -> tuple[list[dict[str, Any]], Optional[dict[str, Any]], Counter[str]]:
    stats: Counter[str] = Counter()
    if _hidden_verdict(sb, p, p.source, p.humaneval_test) != "pass":
        stats["problems_failing_canonical"] += 1
        return [], None, stats
    n = len(visible_asserts(p))
    if n:
        base = _visible_results(sb, p, p.source, n)
        if base is None or len(base) != n or not all(base.values()):
            stats["problems_visible_broken"] += 1
            return [], None, stats
    cases = _generate_cases(p, seed, sb, max(CASES_MIN, n + 1))
    if len(cases) <= (n + 1) // 2 + 1:  # must outnumber any task's visible asserts
        stats["problems_too_few_cases"] += 1
        return [], None, stats
    if _hidden_verdict(sb, p, p.source, hidden_test(p, [], cases)) != "pass":
        stats["problems_failing_cases"] += 1
        return [], None, stats
    out: list[tuple[dict[str, Any], list[int], str]] = []  # task, its exclusions when kept, bug source
    shown: set[int] = set()
    for injector in INJECTORS:
        order = list(range(len(sites(p.source, injector, p.solution_start_line))))
        random.Random(f"{seed}:{p.id}:{injector}").shuffle(order)
        kept = 0
        for site in order:
            if kept >= per_pair:
                break
            try:
                m = inject(p.source, injector, site, p.solution_start_line)
            except ValueError:
                stats["rejected_unparsable"] += 1
                continue
            assert m.source.replace(m.fix_old, m.fix_new, 1) == p.source and m.source.count(m.fix_old) == 1
            verdict = _hidden_verdict(sb, p, m.source, p.humaneval_test)
            if verdict != "fail":
                stats["rejected_timeout" if verdict == "timeout" else "rejected_equivalent"] += 1
                continue
            if n:
                res = _visible_results(sb, p, m.source, n)
                if res is None:
                    stats["rejected_timeout"] += 1
                    continue
                visible, shows = _choose_visible(res, n)
            else:
                visible, shows = [], True  # the whole check runs visibly; it failed above
            exclude = _exclusions(p, shown | set(visible))
            verdict = _hidden_verdict(sb, p, m.source, hidden_test(p, exclude, cases))
            if verdict != "fail":
                stats["rejected_timeout" if verdict == "timeout" else "rejected_visible_only"] += 1
                continue
            kept += 1
            shown |= set(visible)
            out.append(({"problem": p.id, "injector": injector, "site": site, "sha256": sha256(m.source),
                         "visible": visible, "visible_fails": shows, "bug": m.description}, exclude, m.source))
    final = _exclusions(p, shown)
    test = hidden_test(p, final, cases)
    found = []
    for task, exclude, source in out:
        if exclude != final and _hidden_verdict(sb, p, source, test) != "fail":
            stats["rejected_visible_only"] += 1  # a later task shows the asserts that caught it
            continue
        found.append(task)
    return found, {"exclude": final, "cases": cases}, stats


def build_manifest(
    *,
    seed: int = 0,
    per_pair: int = 2,
    backend: str = "local",
    workers: int = 2,
    progress: Optional[Callable[[int, int], None]] = None,
    limit: Optional[int] = None,
) -> dict[str, Any]:
    """Generate and verify the coding tasks; returns the manifest (write it with `atomic_write_json`).

    `per_pair` bugs per (problem, injector) at most; `workers` sandboxes of `backend` in parallel;
    `progress(done, total)` after each problem; `limit` builds only the first N problems (tests).
    """
    t0 = time.monotonic()
    problems, data_sha = humaneval_problems()
    todo = list(problems[:limit] if limit else problems)
    stats: Counter[str] = Counter()
    local = threading.local()
    made: list[Sandbox] = []
    lock = threading.Lock()
    done = 0

    def one(p: Problem) -> tuple[list[dict[str, Any]], Optional[dict[str, Any]]]:
        nonlocal done
        if not hasattr(local, "sb"):
            local.sb = make_sandbox(backend, SandboxConfig(timeout_s=30))
            with lock:
                made.append(local.sb)
        got, hidden, counted = _build_problem(p, seed, per_pair, local.sb)
        with lock:
            stats.update(counted)
            done += 1
            if progress:
                progress(done, len(todo))
        return got, hidden

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            results = list(ex.map(one, todo))
    finally:
        for sb in made:
            sb.close()
    found = [t for got, _ in results for t in got]
    hidden = {p.id: h for p, (got, h) in zip(todo, results) if got and h is not None}
    by_injector = Counter(t["injector"] for t in found)
    held = held_out_problems([p.id for p in problems], HELD_OUT_SEED)
    return {
        "version": MANIFEST_VERSION,
        "human_eval_sha256": data_sha,
        "seed": seed,
        "per_pair": per_pair,
        "held_out_seed": HELD_OUT_SEED,
        "held_out_problems": held,
        "counts": {
            "problems": len(todo),
            "problems_with_tasks": len({t["problem"] for t in found}),
            "tasks": len(found),
            "held_out_tasks": sum(t["problem"] in held for t in found),
            "visible_tests_show_the_bug": sum(t["visible_fails"] for t in found),
            "generated_cases": sum(len(h["cases"]) for h in hidden.values()),
            "humaneval_asserts_hidden": sum(len(visible_asserts(p)) - len(hidden[p.id]["exclude"])
                                            for p in todo if p.id in hidden),
            "by_injector": dict(sorted(by_injector.items())),
            **dict(sorted(stats.items())),
        },
        "backend": backend,
        "build_seconds": round(time.monotonic() - t0, 1),
        "hidden": hidden,
        "tasks": found,
    }
