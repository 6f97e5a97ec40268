"""Build 3D parts in Blender with an agent: it writes `bpy` snippets, the sandbox runs them, the checks come back.

Each step is one `blender(code)` tool call (or a ```python block); after it the agent reads what the code
printed, the scene, and every check of the model against the instruction (watertight, size and placement,
volume, bodies, through-holes, probe points), with the step and the modifier that broke the model named.
The verifier rebuilds the model from the steps in a clean sandbox and checks it again. Needs Docker and
the 3D sandbox image (`looplift sandbox build-image --3d`, ~1 minute, ~1.3 GB).

    python examples/modeling_agent.py --policy oracle --episodes 3     # no model: the reference oracle
    looplift up                                                         # in another terminal, then:
    python examples/modeling_agent.py --episodes 2 --text-only          # the served (tiny) model

The tiny model `looplift up` builds cannot write Blender code: expect reward 0 from it; the run shows the
plumbing. A real model on a GPU machine: serve an instruction-tuned HF model that knows Python and tool
calling, e.g.

    vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --served-model-name policy --max-model-len 16384 \\
        --enable-auto-tool-choice --tool-call-parser hermes --port 8000
    python examples/modeling_agent.py --gateway http://127.0.0.1:8000/v1 --model policy --episodes 20

(`looplift up --model DIR` serves a local HF directory behind the gateway the same way; any other
OpenAI-compatible endpoint works with `--gateway URL` and the key in $LOOPLIFT_API_KEY.) Without a
tool-call parser, add `--text-only`: the tool is not offered and the model answers with ```python blocks.
"""

from __future__ import annotations

import argparse
import sdk
from envs import env_families


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=3, help="tasks to run (distinct kinds first)")
    ap.add_argument("--kind", default=None, help="only this kind of part, e.g. flange, hole_grid (default: all kinds)")
    ap.add_argument("--train", action="store_true", help="draw from the training split instead of the held-out one")
    ap.add_argument("--policy", default=None, help="a reference policy instead of a model: oracle, noop, cheat-...")
    ap.add_argument("--gateway", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible base URL of the model")
    ap.add_argument("--model", default="policy", help="model name (the gateway's alias by default)")
    ap.add_argument("--text-only", action="store_true", help="hide the tool; the model writes ```python blocks")
    args = ap.parse_args()

    fam = env_families()["modeling"]()
    if args.policy is not None and args.policy not in fam.policies:
        raise SystemExit(f"unknown policy {args.policy!r}; choose from {', '.join(sorted(fam.policies))}")
    split = "train" if args.train else "held_out"
    pool = fam.tasks(split, None if split == "held_out" else max(args.episodes * 20, 400), 0)
    chosen = [t for t in pool if args.kind in (None, t.data["kind"])][: args.episodes]
    if not chosen:
        raise SystemExit(f"no {split} task of kind {args.kind!r}")

    def factory() -> sdk.Environment:
        env = fam.env_factory()
        env.offer_tools = not args.text_only  # type: ignore[attr-defined] - ModelingEnv: no tools, text actions
        return env

    try:
        trajs = sdk.run(chosen, factory, verifier=fam.verifier, budget=fam.budget, system_prompt=fam.system_prompt,
                        policy=fam.policies[args.policy] if args.policy else None, base_url=args.gateway,
                        model=args.model, app="modeling-example", concurrency=2)
    finally:
        if fam.close is not None:
            fam.close()
    for t in trajs:
        o = t.outcome
        assert o is not None
        failed = "; ".join(o.details.get("failed", [])[:2])
        print(f"{t.task_id}: success={o.success} steps={len(t.steps)} end={t.end_reason}"
              + (f" failed: {failed}" if failed else "") + (f" verifier_error={o.error}" if o.error else ""))
    print(f"solved {sum(bool(t.outcome and t.outcome.success) for t in trajs)}/{len(trajs)}")
    if trajs and trajs[0].steps:
        print("\nfeedback after the first episode's last step:\n" + trajs[0].steps[-1].observation)


if __name__ == "__main__":
    main()
