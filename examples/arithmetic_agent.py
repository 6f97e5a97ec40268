"""Run the demo task against a running `looplift up`: the model writes Python, a sandbox runs it,
the output goes back to the model, a verifier checks the answer, and every episode goes to the
collector (anonymized there before it is stored).

    looplift up            # in another terminal
    python examples/arithmetic_agent.py --episodes 20
"""

from __future__ import annotations

import argparse

import sdk
from envs import ArithmeticEnv, ArithmeticVerifier, training_tasks
from sandboxes import make_pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--gateway", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--collector", default="http://127.0.0.1:8100")
    args = ap.parse_args()

    pool = make_pool(size=2)  # Docker when an engine answers, else the local backend
    with sdk.CollectorClient(args.collector) as collector:
        trajectories = sdk.run(
            training_tasks(args.episodes, seed=42),
            lambda: ArithmeticEnv(pool=pool),
            verifier=ArithmeticVerifier(),
            collector=collector,
            app="arithmetic-example",
            base_url=args.gateway,
            max_steps=4,
        )
    pool.close()
    solved = sum(t.outcome.success for t in trajectories if t.outcome)
    print(f"solved {solved}/{len(trajectories)}; served by {trajectories[0].served_version}")
    print("last episode:")
    for m in trajectories[-1].messages:
        print(f"  {m.role:>9}: {m.content!r}")


if __name__ == "__main__":
    main()
