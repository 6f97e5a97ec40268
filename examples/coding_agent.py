"""Repair bugs in HumanEval solutions with an agent that runs commands and edits files in a sandbox.

Each episode gets a workdir with a buggy `solution.py`, some visible tests and `run_tests.sh`; the agent
acts through the tools `run`, `read_file` and `edit_file` (or plain-text actions), and the verifier
runs hidden tests on `solution.py` alone, in a clean sandbox. Every episode can go to the collector.

    python examples/coding_agent.py --policy oracle --episodes 5        # no model: the reference oracle
    python examples/coding_agent.py --policy cheat-conftest             # a cheat: must score 0

Against a served model (`looplift up` in another terminal, the gateway's alias `policy`). A model
served without tool calling gets the plain-text actions instead (fenced bash blocks, `# file:` blocks):

    python examples/coding_agent.py --episodes 5 --text-actions

The embedded tiny model cannot do this task: its context is 512 tokens and a coding task's first
message is 836-2,555 tokens with its tokenizer (median 1,297, held-out split, measured), so vLLM will
refuse the request and the loop records `end_reason="generation_error"`. This needs a real model.

On a GPU: serve a coding model with tool calling switched on (the CUDA build of vLLM; `looplift up`
does not pass tool-call flags to vLLM yet), then point the example at it:

    python -m vllm.entrypoints.openai.api_server --model /models/Qwen2.5-Coder-7B-Instruct \\
        --served-model-name coder --enable-auto-tool-choice --tool-call-parser hermes --port 8001
    python examples/coding_agent.py --base-url http://127.0.0.1:8001/v1 --model coder --episodes 50

Any OpenAI-compatible endpoint works the same way (`--base-url`, `--model`, key in $LOOPLIFT_API_KEY).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import sdk
from envs import env_families


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--split", default="held_out", choices=["held_out", "train"])
    ap.add_argument("--policy", default=None, help="a reference policy (oracle, noop, cheat-...) instead of a model")
    ap.add_argument("--model", default="policy", help="model name at the endpoint (default: the gateway alias)")
    ap.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: $LOOPLIFT_BASE_URL or "
                                                     "the local gateway)")
    ap.add_argument("--text-actions", action="store_true", help="offer no tools: plain-text actions only")
    ap.add_argument("--collector", default=None, help="collector URL to send the trajectories to")
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()

    fam = env_families()["coding"]()
    try:
        if args.policy is not None and args.policy not in fam.policies:
            ap.error(f"unknown policy {args.policy!r}; use one of: {', '.join(sorted(fam.policies))}")
        env_factory = fam.env_factory
        if args.text_actions:
            def env_factory() -> Any:
                env = fam.env_factory()
                env.tools = []  # CodingEnv(use_tools=False): the plain-text actions only
                return env
        with contextlib.ExitStack() as stack:
            collector = stack.enter_context(sdk.CollectorClient(args.collector)) if args.collector else None
            trajectories = sdk.run(
                fam.tasks(args.split, args.episodes, 0), env_factory, verifier=fam.verifier,
                policy=fam.policies[args.policy] if args.policy else None, model=args.model, base_url=args.base_url,
                budget=fam.budget, system_prompt=fam.system_prompt, tool_choice=fam.tool_choice,
                collector=collector, app="coding-example", concurrency=args.concurrency,
            )
    finally:
        if fam.close is not None:
            fam.close()
    solved = sum(1 for t in trajectories if t.outcome and t.outcome.success)
    print(f"solved {solved}/{len(trajectories)} ({args.policy or args.model})")
    last = trajectories[-1]
    print(f"last episode: {last.task_id}, ended by {last.end_reason}, outcome {last.outcome and last.outcome.success}")
    for step in last.steps:
        print(f"  {step.action[:100]!r}\n    -> {step.observation[:160]!r}")


if __name__ == "__main__":
    main()
