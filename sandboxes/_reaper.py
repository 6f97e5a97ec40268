"""The containers of a process go when it goes: `python -m sandboxes._reaper OWNER [ENGINE_URL]`.

A process's first `DockerSandbox` on an engine starts one reaper for that engine (default: DOCKER_HOST; a pool
over several engines, `_engines.py`, has one per engine), tied to that process with `sdk.infra.spawn_tied`. The
reaper waits; when its guardian sends SIGTERM -- because the owner ended, however it ended, SIGKILL
included -- it force-removes every container labelled `looplift.owner=OWNER` and exits. After a normal exit
there is nothing left to remove (each sandbox removes its container when closed or collected); after a
SIGKILL the runner in each container has already exited on its stdin's EOF, but the stopped container
would stay until some later process ran `reap_orphans`.

Deliberately small: no docker import until there is work, one list and one remove per container. The
reaper blocks SIGTERM in its first statement (the mask survives the imports that follow), so only an owner
killed within the reaper's first ~50 ms leaves its containers to `reap_orphans`; a sandbox's first container
takes longer than that to start.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, Optional

from sdk.infra import TiedProcess

#: Seconds the reaper gets, after SIGTERM, to remove the containers before its guardian SIGKILLs it.
GRACE_S = 60.0

#: Run as `python -c` so the signals are blocked before `sandboxes` and docker-py are imported (~1 s).
_BOOT = ("import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}); "
         "import runpy; runpy.run_module('sandboxes._reaper', run_name='__main__')")
_lock = threading.Lock()
#: Per engine URL (None: DOCKER_HOST): the owner label its reaper removes, and the reaper.
_reapers: dict[Optional[str], tuple[str, TiedProcess]] = {}


def tie_containers_to_this_process(owner: str, engine: Optional[str] = None) -> None:
    """Start this process's reaper for containers labelled `owner` on `engine` (a DOCKER_HOST-style URL; None:
    DOCKER_HOST), once per engine (again after a fork: a new owner)."""
    import os
    import subprocess
    from pathlib import Path

    from sdk.infra import spawn_tied

    with _lock:
        known = _reapers.get(engine)
        if known is not None and known[0] == owner and known[1].poll() is None:
            return
        root = str(Path(__file__).resolve().parents[1])  # so the reaper imports this very `sandboxes`
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        argv = [sys.executable, "-c", _BOOT, owner, *([engine] if engine else [])]
        _reapers[engine] = (owner, spawn_tied(argv, grace_s=GRACE_S, env=env, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL))


def remove_owned(owner: str, client: Any = None, engine: Optional[str] = None) -> list[str]:
    """Force-remove the sandbox containers labelled with `owner` (on `client`, else on the engine at `engine`,
    else on DOCKER_HOST's); returns their names."""
    from ._docker import OWNER_LABEL
    from ._engine import docker_client

    client = client if client is not None else docker_client(url=engine)
    removed = []
    for c in client.api.containers(all=True, filters={"label": f"{OWNER_LABEL}={owner}"}):
        try:
            client.api.remove_container(c["Id"], force=True)
            removed.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
        except Exception:  # noqa: BLE001, S112 - already removed (its sandbox closed it meanwhile)
            continue
    return removed


def main(argv: list[str]) -> int:
    signals = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # already blocked when started through _BOOT
    if len(argv) not in (2, 3):
        print("usage: python -m sandboxes._reaper OWNER [ENGINE_URL]", file=sys.stderr)
        return 2
    signal.sigwait(signals)
    try:
        remove_owned(argv[1], engine=argv[2] if len(argv) == 3 else None)
    except Exception as e:  # noqa: BLE001 - the owner is gone; say why its containers may remain, in one line
        print(f"sandboxes reaper: could not remove the containers of {argv[1]}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
