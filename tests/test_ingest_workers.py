"""Several collector workers ingesting into one Postgres at once, one of them SIGKILLed mid-ingest: once the
senders' spools are replayed, every trajectory id is stored exactly once, and whole.

The harness is bench/ingest_workers.py's (loaded by path): a real `collector serve --workers 2` subprocess on
127.0.0.1 over a fresh Postgres schema (`pg_url`), and three senders, each the SDK's own `CollectorClient` with
its own spool, submitting at once. Each sender also submits, last, the first 15 trajectories of the next
sender's share (which sends them first), so 45 ids arrive twice, through whichever workers hold the
connections, as when an application retries a send whose acknowledgement it never got. A worker (a child
of uvicorn's supervisor holding a sender's connection) is SIGKILLed once the first batch is acknowledged, and
again, up to three times, until a sender has spooled a batch, i.e. until a kill has cut a request in flight.

Broken variants it catches (each tried, in a copy of the tree):
- an ingest that is not idempotent on trajectory id, inserting every id it is given (no look-up of the stored
  ids, no `ON CONFLICT DO NOTHING`): the ids sent twice fail their whole batch with a primary-key violation,
  answered 503, spooled and failing again on every replay until the deadline (lost: not drained);
- a sender that drops a batch whose request died with its worker instead of spooling it (49 lost).
Not caught: a look-up-then-insert without `ON CONFLICT`, which fails only the batch that loses a race and
succeeds when it is replayed (the end state is right; only a spurious 503 shows it); and a 200 sent before
the commit, which takes a kill at one precise moment (tests/test_collector_durability.py kills there).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _bench import load_bench

from sdk import ClientStats


@pytest.mark.slow
def test_two_workers_on_postgres_store_each_id_once_when_one_is_killed(pg_url: str, seeded_home: Path,
                                                                       tmp_path: Path) -> None:
    iw = load_bench("ingest_workers")
    trajs = iw.BC.make_trajectories(360, 7, size=3072)
    shares = [trajs[i::3] for i in range(3)]
    shares = [share + shares[(i + 1) % 3][:15] for i, share in enumerate(shares)]  # 45 ids sent by two senders
    server = iw.Server(pg_url, 2, seeded_home, tmp_path / "collector.log")
    kills: list[dict[str, Any]] = []

    def kill_until_a_request_is_cut(progress: Callable[[], ClientStats]) -> None:
        deadline = time.monotonic() + 40
        while iw.acked(progress()) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        while len(kills) < 3 and progress().spooled == 0 and iw.acked(progress()) < len(trajs):
            kills.append(server.kill_one(random.Random(len(kills))))  # a worker holding a sender's connection
            time.sleep(0.5)  # the cut request's sender spools within milliseconds

    try:
        sent = iw.send_all(server.url, shares, tmp_path / "spool", 45, kill_until_a_request_is_cut)
    finally:
        server.stop()
    assert kills and sent.stats.spooled > 0, f"no kill cut a request in flight: {kills}, {sent.stats}"
    assert sent.drained and sent.stats.rejected == 0, sent.stats
    assert iw.verify(pg_url, trajs, set()) == {"stored": len(trajs), "lost": 0, "duplicated": 0, "broken": 0}
    assert sent.stats.duplicates >= 45  # the collector saw the ids sent twice, and stored them once
