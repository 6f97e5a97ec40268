"""Extract 41-42 figures from long generated annual reports (PDF) with an agent that reads them through tools.

The agent gets `read_page`, `get_table`, `search` and `submit_answer` tools; the verifier answers each
submission with the missing fields, misaligned numbers (scale, sign, period, restated, unit) and broken
sums, and the agent may correct and resubmit (3 submissions). Reports are built on first use (~0.4 s
each) and cached under $LOOPLIFT_HOME/envs/extraction/.

    python examples/report_extraction.py --policy oracle --episodes 5   # no model: the reference oracle
    looplift up                                                          # in another terminal, then:
    python examples/report_extraction.py --episodes 3 --text-only        # the served (tiny) model

The tiny model `looplift up` builds can neither read 10 pages of context nor call tools: expect reward
0 from it; the run shows the plumbing (trajectories reach the collector with `--collector`). A real
model on a GPU machine: serve any instruction-tuned HF model with tool calling and a long context, e.g.

    vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name policy --max-model-len 32768 \\
        --enable-auto-tool-choice --tool-call-parser hermes --port 8000
    python examples/report_extraction.py --gateway http://127.0.0.1:8000/v1 --model policy --episodes 20

(`looplift up --model DIR` serves a local HF directory behind the gateway the same way; any other
OpenAI-compatible endpoint works with `--gateway URL` and the key in $LOOPLIFT_API_KEY.) Without a
tool-call parser, add `--text-only`: the tools are not offered and the model writes commands such as
`read_page 3` or `submit {...}` as plain text.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import sdk
from envs import env_families


class _TextOnly:
    """The family's environment with its tools hidden: actions arrive as plain-text commands."""

    tools: list[dict[str, Any]] = []

    def __init__(self, env: Any) -> None:
        self._env = env

    def reset(self, task: sdk.Task) -> str:
        return str(self._env.reset(task))

    def step(self, action: str) -> sdk.StepResult:
        result: sdk.StepResult = self._env.step(action)
        return result

    def close(self) -> None:
        self._env.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--split", choices=("held_out", "train"), default="held_out")
    ap.add_argument("--policy", default=None, help="run a reference policy instead of a model: oracle, noop, cheat-...")
    ap.add_argument("--gateway", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible base URL")
    ap.add_argument("--model", default="policy", help="model name (the gateway's alias by default)")
    ap.add_argument("--text-only", action="store_true", help="hide the tools; the model writes text commands")
    ap.add_argument("--collector", default=None, help="collector URL to send trajectories to, e.g. http://127.0.0.1:8100")
    args = ap.parse_args()

    fam = env_families()["extraction"]()
    policy = None
    if args.policy is not None:
        if args.policy not in fam.policies:
            raise SystemExit(f"unknown policy {args.policy!r}; choose from {', '.join(sorted(fam.policies))}")
        policy = fam.policies[args.policy]
    factory = (lambda: _TextOnly(fam.env_factory())) if args.text_only else fam.env_factory
    tasks = fam.tasks(args.split, args.episodes, 0)
    collector = sdk.CollectorClient(args.collector) if args.collector else None
    try:
        trajs = sdk.run(tasks, factory, verifier=fam.verifier, budget=fam.budget, system_prompt=fam.system_prompt,
                        tool_choice=fam.tool_choice, policy=policy, base_url=args.gateway, model=args.model,
                        collector=collector, app="report-extraction-example", concurrency=2)
    finally:
        if collector is not None:
            collector.close()
    for t in trajs:
        o = t.outcome
        assert o is not None
        kinds = Counter(o.details.get("errors", {}).values())
        print(f"{t.task_id}: success={o.success} reward={o.reward:.2f} steps={len(t.steps)} end={t.end_reason} "
              f"errors={dict(kinds) or '-'}" + (f" verifier_error={o.error}" if o.error else ""))
    solved = sum(bool(t.outcome and t.outcome.success) for t in trajs)
    print(f"solved {solved}/{len(trajs)}, mean reward {sum(t.outcome.reward for t in trajs if t.outcome) / len(trajs):.3f}")
    last = next((s for s in reversed(trajs[0].steps) if "submission" in s.info), None)
    print("\nlast feedback of the first episode:\n" + (last.observation if last else "(no answer was submitted)"))


if __name__ == "__main__":
    main()
