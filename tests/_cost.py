"""What the suite started, and the budget it may not exceed (issue 31: the suite fits the day).

Every process of a test run appends the expensive things it does to one ledger (`sdk.infra.record_cost`, a JSON
line each, `LOOPLIFT_COST_LOG`): vLLM servers started (by model and flags), models built, sandbox images built, whole
stacks run (`looplift up`, `looplift demo`; the soak runs `up`). conftest points the ledger at the session's temp
dir and sets `LOOPLIFT_COST_TAG` to the running test's id, which child processes inherit, so a vLLM that a `looplift
up` subprocess started is charged to the test that ran it.

At the end of the run the suite prints the table (count and seconds per kind, then per model) and checks `BUDGET`:
a kind counted more often than its budget fails the run, naming the tests that started the extra ones. It is a count,
so it cannot flake; there is no timed assertion. A test that needs one more vLLM start than the budget allows should
use the session's server (`vllm_server`, other versions as adapters loaded by name) or a session fixture that one
started; raise the budget only with the reason in the commit.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

#: The most of each kind one whole `make test` may start. A run of a subset starts fewer.
BUDGET: dict[str, int] = {"vllm": 16, "model_build": 15, "image_build": 0, "stack": 12}


@dataclass(frozen=True)
class Event:
    kind: str
    what: str
    seconds: float | None
    tag: str


def read_ledger(path: Path) -> list[Event]:
    """The ledger's events in the order they were written; a line that is not a whole event (a process killed
    mid-write cannot produce one, but a hand-edited file can) is skipped."""
    events: list[Event] = []
    if not path.is_file():
        return events
    for line in path.read_text().splitlines():
        try:
            d: Any = json.loads(line)
            events.append(Event(str(d["kind"]), str(d["what"]), d.get("seconds"), str(d.get("tag") or "(no test)")))
        except (ValueError, KeyError, TypeError):
            continue
    return events


def over_budget(events: Iterable[Event], budget: dict[str, int]) -> list[str]:
    """One line per kind counted more often than its budget, naming the tests that started the ones beyond it."""
    by_kind: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_kind[e.kind].append(e)
    lines = []
    for kind, evs in sorted(by_kind.items()):
        limit = budget.get(kind)
        if limit is None or len(evs) <= limit:
            continue
        extra = sorted({e.tag for e in evs[limit:]})
        lines.append(f"{kind}: {len(evs)} started, budget {limit}; the ones beyond it were started by: "
                     + "; ".join(extra))
    return lines


def report(events: list[Event], budget: dict[str, int], write: Callable[[str], None]) -> None:
    """The cost table: per kind (count, seconds, budget), then per kind and model/what (count, seconds, tests)."""
    def secs(evs: list[Event]) -> str:
        known = [e.seconds for e in evs if e.seconds is not None]
        return f"{sum(known):8.0f}" if known else f"{'-':>8}"

    by_kind: dict[str, list[Event]] = defaultdict(list)
    by_what: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in events:
        by_kind[e.kind].append(e)
        by_what[(e.kind, e.what)].append(e)
    write(f"{'kind':<12} {'count':>5} {'seconds':>8} {'budget':>6}")
    for kind in sorted(set(budget) | set(by_kind)):
        evs = by_kind.get(kind, [])
        write(f"{kind:<12} {len(evs):>5} {secs(evs)} {budget.get(kind, '-'):>6}")
    if by_what:
        write("")
        write(f"{'kind':<12} {'count':>5} {'seconds':>8}  what  <- tests")
        for (kind, what), evs in sorted(by_what.items()):
            tests = sorted({e.tag.split(" ")[0] for e in evs})
            shown = ", ".join(tests[:4]) + (f", +{len(tests) - 4} more" if len(tests) > 4 else "")
            write(f"{kind:<12} {len(evs):>5} {secs(evs)}  {what}  <- {shown}")
