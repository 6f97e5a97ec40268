"""A ledger of the expensive things a process did: vLLM servers started, models built, sandbox images built,
whole stacks run. Off unless `LOOPLIFT_COST_LOG` names a file; then each such event appends one JSON line to it:

    {"kind": "vllm", "what": "tiny-3f2a… --tool-call-parser pythonic", "seconds": 41.2, "tag": "...", "pid": 123}

`tag` is `LOOPLIFT_COST_TAG` at the time of the event (the test suite sets it to the running test's id, and a child
process inherits it, so a vLLM that a `looplift up` subprocess started is charged to the test that ran it).

Why a file and not a metric: the events happen in many processes (the test process, `looplift up`, `looplift demo`,
the soak's children), and one line appended with O_APPEND is atomic between them on a local disk. The suite reads
the ledger at the end of a run, prints what it started with the seconds each took, and checks a declared budget
(tests/_cost.py). Deliberately not here: anything on by default, or timing of ordinary requests.
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Optional

COST_LOG_ENV = "LOOPLIFT_COST_LOG"
COST_TAG_ENV = "LOOPLIFT_COST_TAG"
#: The kinds of events; `tests/_cost.py` declares a budget for each.
COST_KINDS = ("vllm", "model_build", "image_build", "stack")


def record_cost(kind: str, what: str, seconds: Optional[float] = None) -> None:
    """Append one event to the ledger `LOOPLIFT_COST_LOG` names; do nothing when it is unset. Never raises for a
    ledger that cannot be written (a cost record must not break the work it records)."""
    path = os.environ.get(COST_LOG_ENV, "").strip()
    if not path:
        return
    if kind not in COST_KINDS:
        raise ValueError(f"unknown cost kind {kind!r}; known: {', '.join(COST_KINDS)}")
    line = json.dumps({"kind": kind, "what": what, "seconds": None if seconds is None else round(seconds, 1),
                       "tag": os.environ.get(COST_TAG_ENV) or None, "pid": os.getpid()}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def env_without_config(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """`environ` (default `os.environ`) without looplift's configuration (every `LOOPLIFT_*` variable), for a child
    that must start from defaults (a test's `looplift up`, the soak's stack), but with the cost ledger's two
    variables kept, so that what the child starts is still counted."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if not k.startswith("LOOPLIFT_") or k in (COST_LOG_ENV, COST_TAG_ENV)}
