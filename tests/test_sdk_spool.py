"""The SDK's collector client against a real collector: outage -> spool -> replay, no duplicates."""

from __future__ import annotations

import socket
from pathlib import Path

from collector import CollectorSettings, open_store, serve_in_thread
from sdk import CollectorClient, Message, Outcome, Trajectory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _traj(i: int) -> Trajectory:
    return Trajectory(task_id=f"t{i}", model="policy", messages=[Message(role="user", content=f"q{i}"),
                                                                Message(role="assistant", content=f"a{i}")],
                      outcome=Outcome(success=True, reward=1.0))


def test_collector_down_spools_then_replays_exactly_once(tmp_path: Path) -> None:
    port = _free_port()
    db = f"sqlite:///{tmp_path / 'c.db'}"
    client = CollectorClient(f"http://127.0.0.1:{port}", spool_dir=tmp_path / "spool", retry_interval=0.1,
                             timeout=1.0)
    trajs = [_traj(i) for i in range(5)]
    for t in trajs:
        client.submit(t)  # never blocks, never raises while nothing listens
    assert client.flush(10)
    assert client.stats.spooled == 5 and client.pending_spool()
    for f in client.pending_spool():
        assert f.stat().st_mode & 0o077 == 0  # spool files are private to the user

    with serve_in_thread(CollectorSettings(db_url=db), "127.0.0.1", port):
        assert client.flush(10)
        assert client.pending_spool() == [] and client.stats.replayed == 5
        for t in trajs:  # an application re-sending (e.g. after a lost ack) does not duplicate
            client.submit(t)
        assert client.flush(10)
        client.close()
    store = open_store(db)
    try:
        assert store.count() == 5
        assert client.stats.duplicates == 5
    finally:
        store.close()


def test_wrong_key_is_spooled_not_lost(tmp_path: Path) -> None:
    port = _free_port()
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with serve_in_thread(CollectorSettings(db_url=db, api_keys=("right",)), "127.0.0.1", port):
        bad = CollectorClient(f"http://127.0.0.1:{port}", api_key="wrong", spool_dir=tmp_path / "spool")
        bad.submit(_traj(1))
        bad.close()
        assert bad.stats.spooled == 1 and bad.stats.sent == 0
        good = CollectorClient(f"http://127.0.0.1:{port}", api_key="right", spool_dir=tmp_path / "spool")
        good.submit(_traj(2))
        assert good.flush(10)
        good.close()
        assert good.stats.replayed == 1 and good.stats.sent == 1
    store = open_store(db)
    try:
        assert store.count() == 2
    finally:
        store.close()
