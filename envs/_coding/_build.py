"""The build step of the coding family: generate every candidate bug, keep the verified ones.

For each HumanEval problem:
  1. the canonical solution must pass the full hidden tests through the same judge the verifier uses
     (`_hidden.run_hidden`), and every self-contained assert as a visible unittest (else the problem,
     or the assert, is dropped);
  2. for each injector, its sites are tried in an order shuffled by `seed` (stable per problem and
     injector) until `per_pair` of them give a bug that *fails* the hidden tests without timing out
     (a bug that passes is an equivalent mutant; one that hangs would make every episode on it slow);
  3. the fix is checked structurally: applying `fix_old -> fix_new` to the buggy module gives back the
     canonical module byte for byte, which passed in step 1;
  4. the visible tests are the first half of the self-contained asserts plus, when none of those
     fails on the bug, the first one that does; whether the visible file shows the bug is recorded.

The result is the manifest `tasks.json` (ids, sites, hashes, counts of what was rejected and why, the
held-out problems, the wall time). It runs on the local backend by default: the code run here is the
package's own canonical solutions and their mutants, not model output.
"""

from __future__ import annotations

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
from ._humaneval import Problem, load_problems, visible_asserts, visible_test_file
from ._tasks import HELD_OUT_SEED, held_out_problems

__all__ = ["build_manifest"]

MANIFEST_VERSION = 1
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


def _build_problem(p: Problem, seed: int, per_pair: int, sb: Sandbox) -> tuple[list[dict[str, Any]], Counter[str]]:
    stats: Counter[str] = Counter()
    sb.reset()
    if not run_hidden(sb, p.source, prompt=p.prompt, test=p.test, entry_point=p.entry_point).passed:
        stats["problems_failing_canonical"] += 1
        return [], stats
    n = len(visible_asserts(p))
    if n:
        base = _visible_results(sb, p, p.source, n)
        if base is None or len(base) != n or not all(base.values()):
            stats["problems_visible_broken"] += 1
            return [], stats
    out: list[dict[str, Any]] = []
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
            sb.reset()
            r = run_hidden(sb, m.source, prompt=p.prompt, test=p.test, entry_point=p.entry_point)
            if r.timed_out or "timed out" in r.reason:
                stats["rejected_timeout"] += 1
                continue
            if r.passed:
                stats["rejected_equivalent"] += 1
                continue
            if n:
                res = _visible_results(sb, p, m.source, n)
                if res is None:
                    stats["rejected_timeout"] += 1
                    continue
                visible, shows = _choose_visible(res, n)
            else:
                visible, shows = [], True  # the whole check runs visibly; it failed above
            kept += 1
            out.append({"problem": p.id, "injector": injector, "site": site, "sha256": sha256(m.source),
                        "visible": visible, "visible_fails": shows, "bug": m.description})
    return out, stats


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
    problems, data_sha = load_problems()
    todo = list(problems[:limit] if limit else problems)
    stats: Counter[str] = Counter()
    local = threading.local()
    made: list[Sandbox] = []
    lock = threading.Lock()
    done = 0

    def one(p: Problem) -> list[dict[str, Any]]:
        nonlocal done
        if not hasattr(local, "sb"):
            local.sb = make_sandbox(backend, SandboxConfig(timeout_s=30))
            with lock:
                made.append(local.sb)
        got, counted = _build_problem(p, seed, per_pair, local.sb)
        with lock:
            stats.update(counted)
            done += 1
            if progress:
                progress(done, len(todo))
        return got

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            results = list(ex.map(one, todo))
    finally:
        for sb in made:
            sb.close()
    found = [t for r in results for t in r]
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
            "by_injector": dict(sorted(by_injector.items())),
            **dict(sorted(stats.items())),
        },
        "backend": backend,
        "build_seconds": round(time.monotonic() - t0, 1),
        "tasks": found,
    }
