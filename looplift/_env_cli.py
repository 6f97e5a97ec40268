"""`looplift env …`: list the task families and check one with a reference policy, no model needed.

    looplift env list [--json]
    looplift env try NAME --policy oracle|noop|cheat|cheat-X|PKG.MODULE:ATTR [--episodes N]
                     [--split held_out|train] [--seed S] [--concurrency C] [--sandbox docker|local [--unsafe]]
                     [--out FILE.jsonl] [--json]

`try` runs N episodes of the family's tasks through the ordinary loop (`sdk.arun` with `policy=`:
the same tools, budget and verifier a model would get) and prints
`{"env", "policy", "episodes", "success_rate", "mean_reward"}`. `--policy cheat` runs every cheat of
the family on the same tasks, adds `"by_policy"` (one entry per cheat) and exits 1 when any cheat
scored above 0 (a hole in the verifier). `PKG.MODULE:ATTR` names any policy (`sdk.Policy`:
`(task, messages) -> Message | str`). `--out` writes the trajectories as JSON lines. Bad input (an
unknown family, policy or split) is a one-line error that lists the valid names, exit code 2.

Sandboxes. The family's own reference policies (oracle, noop, cheats) may run on the local backend
(`--sandbox local`, or when no Docker engine answers), with a warning: the local backend sees this
machine's files. A policy named by PKG.MODULE:ATTR (a model, or anyone's code) never does unless
asked with `--sandbox local --unsafe`; without Docker it is an error that says how to get Docker
(`envs._pools`: the same rule the families apply to training and gates).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from rich.console import Console

from sdk.errors import ConfigError
from sdk.infra import cli_fail, import_object, print_table

if TYPE_CHECKING:
    from sdk import EnvFamily, Policy, Trajectory

app = typer.Typer(help="Task families: list them, try one with a reference policy (no model needed).",
                  no_args_is_help=True, add_completion=False)
_out = Console()
_err = Console(stderr=True)

#: `cli_fail`'s code for bad input (an unknown family, policy or split), as documented above.
_BAD_INPUT = 2
#: The exit code when a cheat scored above 0.
_CHEAT_SCORED = 1


def _families() -> dict[str, Callable[[], EnvFamily]]:
    try:
        from envs import env_families
    except ImportError as e:
        cli_fail(f"task families need the [sandboxes] extra ({e}); `pip install 'looplift[sandboxes]'`", _BAD_INPUT)
    return env_families()


@app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="One JSON object per line.")) -> None:
    """List the task families: name, description, policies (loading each one; none starts a sandbox)."""
    rows: list[dict[str, Any]] = []
    for name, load in _families().items():
        try:
            fam = load()
        except Exception as e:  # noqa: BLE001 - one family's missing dependency must not hide the others
            rows.append({"env": name, "available": False, "error": f"{type(e).__name__}: {e}"})
            continue
        try:
            rows.append({"env": name, "available": True, "description": fam.description,
                         "policies": ["oracle", "noop", *fam.cheats()], "max_steps": fam.budget.max_steps})
        finally:
            if fam.close is not None:
                fam.close()
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    from rich.table import Table

    table = Table("env", "policies", "description")
    for r in rows:
        table.add_row(r["env"], ", ".join(r.get("policies", [])) or "-",
                      r.get("description") or f"[red]unavailable[/red]: {r.get('error')}")
    print_table(_out, table)


def _resolve(fam: EnvFamily, policy: str) -> dict[str, Policy]:
    """name -> policy callable for `policy` ("cheat" expands to every cheat)."""
    if policy == "cheat":
        return {name: fam.policies[name] for name in fam.cheats()}
    if policy in fam.policies:
        return {policy: fam.policies[policy]}
    if ":" in policy:
        try:
            fn = import_object(policy, what="cannot load policy")
        except ConfigError as e:
            cli_fail(str(e), _BAD_INPUT)
        if not callable(fn):
            cli_fail(f"{policy!r} is not callable; a policy is (task, messages) -> Message | str", _BAD_INPUT)
        return {policy: fn}
    valid = ", ".join(["cheat", *sorted(fam.policies)])
    cli_fail(f"unknown policy {policy!r} for {fam.name}; use one of: {valid}, or PKG.MODULE:ATTR", _BAD_INPUT)


def _summary(trajs: list[Trajectory]) -> dict[str, Any]:
    n = len(trajs)
    ok = sum(1 for t in trajs if t.outcome and t.outcome.success)
    reward = sum(t.outcome.reward for t in trajs if t.outcome)
    return {"episodes": n, "success_rate": round(ok / n, 4) if n else 0.0,
            "mean_reward": round(reward / n, 4) if n else 0.0}


@app.command("try")
def try_cmd(
    name: str = typer.Argument(..., help="Family name (see `looplift env list`)."),
    policy: str = typer.Option("oracle", "--policy", help="oracle | noop | cheat (every cheat) | cheat-<what> | "
                                                          "PKG.MODULE:ATTR"),
    episodes: int = typer.Option(20, "--episodes", min=1, help="Episodes per policy (distinct tasks)."),
    split: str = typer.Option("held_out", "--split", help="held_out | train"),
    seed: int = typer.Option(0, "--seed", help="Which tasks are drawn."),
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Episodes at once (also the sandbox pool size)."),
    sandbox: Optional[str] = typer.Option(None, "--sandbox", help="docker | local (default: Docker when it answers)."),
    unsafe: bool = typer.Option(False, "--unsafe", help="With --sandbox local: run a PKG.MODULE:ATTR policy on the "
                                                        "local backend, which sees this machine's files."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the trajectories here as JSON lines."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run a reference policy on N tasks of a family and print its success rate and mean reward."""
    families = _families()
    if name not in families:
        cli_fail(f"unknown env {name!r}; use one of: {', '.join(sorted(families))}", _BAD_INPUT)
    if split not in ("held_out", "train"):
        cli_fail(f"unknown split {split!r}; use one of: held_out, train", _BAD_INPUT)
    if sandbox not in (None, "docker", "local"):
        cli_fail(f"--sandbox must be docker or local, not {sandbox!r}", _BAD_INPUT)
    if unsafe and sandbox != "local":
        cli_fail("--unsafe goes with --sandbox local (it lets model code run on the local backend)", _BAD_INPUT)
    trusted = policy == "cheat" or ":" not in policy  # the family's own policies, not someone's code
    _choose_sandbox(sandbox, unsafe, trusted)
    os.environ.setdefault("LOOPLIFT_SANDBOX_POOL", str(concurrency))  # a sandbox for each concurrent episode
    import sdk

    try:
        fam = families[name]()
    except Exception as e:  # noqa: BLE001 - a family that cannot load says why, in one line
        cli_fail(f"cannot load the {name} family: {type(e).__name__}: {e}", 1)
    try:
        policies = _resolve(fam, policy)
        tasks = fam.tasks(split, episodes, seed)  # type: ignore[arg-type]  # checked above: held_out or train
        runs: dict[str, list[Trajectory]] = {}
        for pname, fn in policies.items():
            runs[pname] = sdk.run(tasks, fam.env_factory, verifier=fam.verifier, policy=fn, budget=fam.budget,
                                  system_prompt=fam.system_prompt, tool_choice=fam.tool_choice,
                                  concurrency=concurrency, app=f"env-try-{name}")
    except Exception as e:  # noqa: BLE001 - the machinery failed (no sandbox, ...): one line
        cli_fail(f"{type(e).__name__}: {e}", 1)
    finally:
        if fam.close is not None:
            fam.close()
    everything = [t for trajs in runs.values() for t in trajs]
    result: dict[str, Any] = {"env": name, "policy": policy, **_summary(everything)}
    if policy == "cheat":
        result["by_policy"] = {p: _summary(trajs) for p, trajs in runs.items()}
    if out is not None:
        from sdk.infra import atomic_write

        atomic_write(out, "".join(t.model_dump_json() + "\n" for t in everything))
    if as_json:
        print(json.dumps(result))
    else:
        from rich.table import Table

        table = Table("env", "policy", "episodes", "success rate", "mean reward", title=f"{name} ({split})")
        for p, trajs in runs.items():
            s = _summary(trajs)
            table.add_row(name, p, str(s["episodes"]), f"{s['success_rate']:.1%}", f"{s['mean_reward']:.3f}")
        print_table(_out, table)
    scored = {p: s for p, s in result.get("by_policy", {}).items() if s["mean_reward"] > 0 or s["success_rate"] > 0}
    if scored:
        cli_fail(f"{len(scored)} of {len(runs)} cheats of {name} scored above 0 (each must score 0): "
                 + ", ".join(f"{p} mean reward {s['mean_reward']}, success {s['success_rate']:.0%}"
                             for p, s in scored.items()), _CHEAT_SCORED)


def _choose_sandbox(sandbox: Optional[str], unsafe: bool, trusted: bool) -> None:
    """Tell the families' pools which backend to use (`$LOOPLIFT_SANDBOX`, `$LOOPLIFT_SANDBOX_UNSAFE`), or exit.

    Docker when asked or when it answers. The local backend sees this machine's files, so: for the family's
    own policies (`trusted`) it is used when asked or when Docker does not answer, with a warning; for a
    PKG.MODULE:ATTR policy only with `--sandbox local --unsafe`, and never as a fallback.
    """
    from envs import BACKEND_ENV, HOST_FIX, HOST_WARNING, UNSAFE_ENV

    if sandbox == "local" and not (unsafe or trusted):
        cli_fail("refusing to run a PKG.MODULE:ATTR policy on the local sandbox backend: it sees this machine's "
                 f"files (the checkout, installed packages and their data); {HOST_FIX}", _BAD_INPUT)
    if sandbox is None and trusted and os.environ.get(BACKEND_ENV) is None:
        from sandboxes import choose_backend

        choice = choose_backend(None)
        if choice.backend == "local":
            _err.print(f"[yellow]no Docker sandbox ({choice.reason}): the family's reference policies run on the "
                       "local backend[/yellow]")
            sandbox = "local"
    if sandbox:
        os.environ[BACKEND_ENV] = sandbox  # read by the families' pools
    if sandbox == "local":
        os.environ[UNSAFE_ENV] = "1"  # asked for (or, for the family's own policies, accepted) above
        _err.print(f"[yellow]warning: {HOST_WARNING}[/yellow]")
