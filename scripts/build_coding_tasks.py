"""Build (generate and verify) the coding family's task manifest, envs/_coding/tasks.json.

    python scripts/build_coding_tasks.py [--per-pair 2] [--workers 2] [--backend local|docker]

Every candidate bug of every (HumanEval problem, injector) pair is run against the problem's full
tests; the manifest keeps the bugs that fail them (and whose fix, the canonical solution, passes).
Run it after changing the injectors or the visible-test selection, and commit the result: the
family refuses to load tasks whose regenerated code does not match it. On a shared machine hold the
lock: `flock /tmp/looplift-heavy.lock python scripts/build_coding_tasks.py`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.progress import Progress

from envs import build_coding_tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-pair", type=int, default=2, help="bugs kept per (problem, injector), at most")
    ap.add_argument("--workers", type=int, default=2, help="sandboxes verifying in parallel")
    ap.add_argument("--backend", default="local", choices=["local", "docker"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="where to write (default: the package's tasks.json)")
    args = ap.parse_args()
    extra = {} if args.out is None else {"out": args.out}
    with Progress() as p:
        bar = p.add_task("verifying the bugs of each problem", total=164)
        manifest = build_coding_tasks(seed=args.seed, per_pair=args.per_pair, backend=args.backend,
                                      workers=args.workers, progress=lambda d, n: p.update(bar, completed=d, total=n),
                                      **extra)
    print(json.dumps({"build_seconds": manifest["build_seconds"], **manifest["counts"]}, indent=1))


if __name__ == "__main__":
    main()
