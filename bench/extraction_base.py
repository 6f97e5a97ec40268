"""The extraction base model on held-out reports: build it (cached), serve it with vLLM, run the family's held-out
split of one level through the ordinary loop, and say where it fails (issue 32: it must start at <= 40% success at
level 1, with room to improve).

Run: `flock /tmp/looplift-heavy.lock .venv/bin/python bench/extraction_base.py [--family qwen] [--level 1] [--n 200]
      [--steps 600] [--episodes 800] [--wrong 0.5] [--json-out bench/results/extraction_base.json]`

Prints and writes: the build (demonstrations, tokens, loss, seconds: 0 when cached), then the held-out figures of the
served model — success (every field right), field accuracy (the mean reward), by field and by the verifier's
category of each miss (missing, scale, period, swapped, sign, wrong...) — and of the family's careless oracle
(what the demonstrations were) on the same reports, as the ceiling the model imitates. Sampling: the family's own
(`EnvFamily.sampling`), the gate's seed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections import Counter
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import sdk  # noqa: E402
from envs import careless_extraction, extraction_family  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="qwen")
    ap.add_argument("--level", type=int, default=1, choices=(1, 2, 3))
    ap.add_argument("--n", type=int, default=200, help="held-out reports (max 200)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--episodes", type=int, default=None)
    ap.add_argument("--wrong", type=float, default=None)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    console = Console(width=120)
    from trainer import ExtractionModelConfig, build_extraction_model

    given = {k: v for k, v in (("steps", args.steps), ("episodes", args.episodes), ("wrong", args.wrong)) if v is not None}
    cfg = ExtractionModelConfig(family=args.family, level=args.level, **given)  # type: ignore[arg-type]
    t0 = time.monotonic()
    model = build_extraction_model(cfg, say=console.print,
                                   progress=lambda s, n, loss: console.print(f"step {s}/{n} loss {loss:.3f}")
                                   if s % 50 == 0 else None)
    build_s = round(time.monotonic() - t0, 1)
    meta = json.loads((model / "looplift.json").read_text())
    fam = extraction_family(args.level)
    tasks = fam.tasks("held_out", args.n, 0)
    careless = sdk.run(tasks, fam.env_factory, verifier=fam.verifier, budget=fam.budget, system_prompt=fam.system_prompt,
                       policy=careless_extraction(cfg.wrong, cfg.seed), concurrency=2)
    served, serve_s = _served(model, fam, tasks, args.concurrency, console)
    rows = {"careless oracle (the demonstrations)": _figures(careless), f"{model.name} (served)": _figures(served)}
    table = Table(title=f"extraction level {args.level}, held-out ({args.n} reports)")
    for col in ("policy", "success", "field accuracy", "misses by category", "ended"):
        table.add_column(col)
    for name, f in rows.items():
        table.add_row(name, f"{f['success']:.3f}", f"{f['field_accuracy']:.3f}", json.dumps(f["misses"]),
                      json.dumps(f["ended"]))
    console.print(table)
    result = {"machine": platform.platform(), "config": meta["config"], "model": str(model), "build": {
        k: meta.get(k) for k in ("demonstrations", "left_out_too_long", "tokens_p50", "tokens_max", "final_loss",
                                 "seconds")} | {"wall_s": build_s}, "serve_and_eval_s": serve_s, "policies": rows}
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {args.json_out}")


def _served(model: Path, fam: sdk.EnvFamily, tasks: list[sdk.Task], concurrency: int,
            console: Console) -> tuple[list[sdk.Trajectory], float]:
    from server import VLLMConfig, start_vllm

    t0 = time.monotonic()
    console.print("starting vLLM ...")
    config = VLLMConfig(model_dir=model, max_model_len=4096, warm_up=True)
    with start_vllm(config) as vllm:
        done: list[sdk.Trajectory] = []
        trajs = asyncio.run(sdk.arun(tasks, fam.env_factory, verifier=fam.verifier, budget=fam.budget,
                                     model=config.served_model_name, base_url=vllm.url + "/v1",
                                     system_prompt=fam.system_prompt, sampling=fam.sampling, concurrency=concurrency,
                                     tool_choice=fam.tool_choice,
                                     on_episode=lambda t: (done.append(t), console.print(
                                         f"{len(done)}/{len(tasks)} {t.outcome.reward if t.outcome else None}")
                                         if len(done) % 20 == 0 else None)))
    return trajs, round(time.monotonic() - t0, 1)


def _figures(trajs: list[sdk.Trajectory]) -> dict[str, object]:
    n = len(trajs)
    misses: Counter[str] = Counter()
    for t in trajs:
        details = (t.outcome.details or {}) if t.outcome else {}
        for cat in (details.get("errors") or {}).values():
            misses[str(cat)] += 1
        if details.get("schema_errors"):  # the last answer was rejected whole: no field graded
            misses["answer rejected (schema)"] += 1
        if not details.get("submissions"):
            misses["never submitted"] += 1
    return {"episodes": n, "success": round(sum(bool(t.outcome and t.outcome.success) for t in trajs) / n, 4),
            "field_accuracy": round(sum(t.outcome.reward for t in trajs if t.outcome) / n, 4),
            "misses": dict(misses.most_common()), "ended": dict(Counter(t.end_reason for t in trajs))}


if __name__ == "__main__":
    main()
