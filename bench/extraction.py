"""Extraction family: build the held-out split (generation time, sizes), then run every reference policy on it.

Run: `flock /tmp/looplift-heavy.lock .venv/bin/python bench/extraction.py [--n 200] [--json-out bench/results/extraction.json]`

  1. build     every held-out report into a fresh, empty cache (so nothing is reused): seconds per report
               (truth + reportlab PDF + pdfplumber read-back), PDF bytes, pages;
  2. sizes     reports, pages (min/mean/max), fields per report, relations (and how many cross sections);
  3. policies  oracle, noop and every cheat through `sdk.run(..., policy=)` with the family's budget and
               verifier: success rate, mean reward, episodes per second (the built cache is reused).

The cache is built under `--home` (default: a temporary directory, deleted afterwards) so that a run
measures generation from scratch and leaves $LOOPLIFT_HOME alone. Not measured here: a real model.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script: the repository root must come before bench/ (whose sandboxes.py would shadow the package).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import sdk  # noqa: E402
from envs._extraction import build, family, held_out_seeds, report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="held-out reports to build and run (max 200)")
    ap.add_argument("--home", type=Path, default=None, help="cache directory (default: a fresh temporary one)")
    ap.add_argument("--level", type=int, default=3, choices=(1, 2, 3),
                    help="1: the income statement alone, 3-6 fields; 2: statements and restatement note, 8-12 "
                         "fields; 3: the whole report (default)")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    console = Console(width=110)
    home = args.home or Path(tempfile.mkdtemp(prefix="looplift-extraction-bench-"))
    try:
        result = _run(args.n, home, console, args.level)
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {args.json_out}")


def _run(n: int, home: Path, console: Console, level: int = 3) -> dict[str, object]:
    seeds = held_out_seeds(n)
    per_report, pages, pdf_bytes = [], [], []
    with console.status(f"building {n} reports") as status:
        for i, seed in enumerate(seeds):
            t0 = time.perf_counter()
            out = build(seed, home, level)
            per_report.append(time.perf_counter() - t0)
            pages.append(len(json.loads((out / "index.json").read_text())["pages"]))
            pdf_bytes.append((out / "report.pdf").stat().st_size)
            status.update(f"building reports: {i + 1}/{n}")
    reports = [report(s, level) for s in seeds]
    fields = [len(r.specs) for r in reports]
    relations = [len(r.relations) for r in reports]
    cross = [sum(rel.cross_section for rel in r.relations) for r in reports]
    sizes = {"level": level, "reports": n, "pages_min": min(pages), "pages_mean": round(statistics.mean(pages), 2),
             "pages_max": max(pages), "fields_min": min(fields), "fields_max": max(fields),
             "relations": min(relations), "cross_section_relations": min(cross),
             "restated": sum(r.restated for r in reports), "pdf_kb_mean": round(statistics.mean(pdf_bytes) / 1024, 1)}
    gen = {"s_per_report_mean": round(statistics.mean(per_report), 3),
           "s_per_report_p50": round(statistics.median(per_report), 3),
           "s_per_report_max": round(max(per_report), 3), "total_s": round(sum(per_report), 1)}
    fam = family(home, level)
    tasks = fam.tasks("held_out", n, 0)
    rows = {}
    for name in ["oracle", "noop"] + fam.cheats():
        t0 = time.perf_counter()
        trajs = sdk.run(tasks, fam.env_factory, verifier=fam.verifier, budget=fam.budget, policy=fam.policies[name],
                        system_prompt=fam.system_prompt, concurrency=2)
        wall = time.perf_counter() - t0
        out = [t.outcome for t in trajs if t.outcome is not None]
        rows[name] = {"episodes": len(trajs), "success_rate": round(sum(o.success for o in out) / len(trajs), 4),
                      "mean_reward": round(sum(o.reward for o in out) / len(trajs), 4),
                      "episodes_per_s": round(len(trajs) / wall, 1),
                      "errors": sum(1 for o in out if o.error) + sum(1 for t in trajs if t.end_reason.endswith("error"))}
    t = Table(title=f"extraction level {level}, held-out split ({n} reports)")
    for col in ("policy", "episodes", "success_rate", "mean_reward", "episodes/s", "errors"):
        t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, r in rows.items():
        t.add_row(name, str(r["episodes"]), f"{r['success_rate']:.3f}", f"{r['mean_reward']:.4f}",
                  f"{r['episodes_per_s']:.1f}", str(r["errors"]))
    console.print(t)
    console.print(f"generation: {gen}")
    console.print(f"sizes: {sizes}")
    return {"machine": platform.platform(), "python": platform.python_version(), "generation": gen, "sizes": sizes,
            "policies": rows}


if __name__ == "__main__":
    main()
