"""The alpha-spending ledger: how many gates each app has had, so that its k-th gate tests at alpha_k
(`_gate`, part 4) across processes, hosts sharing the runs dir, and restarts.

    <runs>/gate-ledger/<app>-<hash>.json    {"app", "gates": gates so far, "spent": sum of their alpha_k, "history"}

One file per app (a job without an app, training on all apps, counts under "all-apps"), rewritten
atomically (`sdk.infra.atomic_write_json`: a reader sees the old ledger or the new one, never half of one).
A job reads the count under an exclusive `fcntl.flock` on `<file>.lock`, gates at k = count + 1, and
records k *before* it promotes, so two jobs of one app never test at the same k. A job that dies between
the test and the record never promoted (the promotion comes after the record), so its k being reused is
safe; a recorded gate whose promotion then failed spent its alpha for nothing (conservative).

A ledger that cannot be read is an error, never a count of zero (that would spend the app's alpha again);
the message says how to restore it or reset it deliberately.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

from sdk.infra import atomic_write_json

from ._gate import GateDecision
from .errors import TrainerError

DIR = "gate-ledger"
"""The ledgers' folder inside the runs folder (`list_runs` skips it: it is not a run)."""
ALL_APPS = "all-apps"


def ledger_path(runs_dir: Path, app: Optional[str]) -> Path:
    """`<runs>/gate-ledger/<app>-<8 hex of sha256(app)>.json` (the hash keeps apps whose names differ only in
    characters a file name cannot hold apart), or `all-apps.json`."""
    if app is None:
        return runs_dir / DIR / f"{ALL_APPS}.json"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", app)[:64]
    return runs_dir / DIR / f"{slug}-{hashlib.sha256(app.encode()).hexdigest()[:8]}.json"


class GateLedger:
    """One app's gate count (see the module docstring)."""

    def __init__(self, runs_dir: Path, app: Optional[str]) -> None:
        self.app = app
        self.path = ledger_path(Path(runs_dir), app)

    def read(self) -> dict[str, Any]:
        """The ledger: {"app", "gates", "spent", "history"}; an app without one has had no gate."""
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"app": self.app, "gates": 0, "spent": 0.0, "history": []}
        except (OSError, ValueError) as e:
            raise self._unreadable(str(e)) from None
        if not (isinstance(raw, dict) and isinstance(raw.get("gates"), int) and raw["gates"] >= 0
                and isinstance(raw.get("history"), list)):
            raise self._unreadable("not a ledger: it needs a whole number 'gates' >= 0 and a list 'history'")
        return raw

    def gates(self) -> int:
        """Gates this app has had (each spent its alpha_k)."""
        return int(self.read()["gates"])

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """`with ledger.locked() as k:` gate as the app's k-th gate and `record` it, with no other job of the
        app between the read and the record."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self.gates() + 1
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def record(self, decision: GateDecision, run_id: str) -> None:
        """Count `decision` (a gate that ran its test) as the app's gate `decision.k`; atomically."""
        led = self.read()
        if not decision.tested:
            raise ValueError("only a gate that ran its test spends alpha; this one refused before testing")
        if decision.k != led["gates"] + 1:
            raise ValueError(f"gate {decision.k} recorded after gate {led['gates']} of app {self.app!r}: "
                             "take k from `GateLedger.locked()` and record under that lock")
        led["history"].append({"k": decision.k, "run_id": run_id, "at": datetime.now(timezone.utc).isoformat(),
                               "alpha": decision.alpha, "alpha_k": decision.alpha_k, "n": decision.n,
                               "b": decision.b, "c": decision.c, "p_value": decision.p_value,
                               "promote": decision.promote})
        led.update(app=self.app, gates=decision.k, spent=float(led.get("spent") or 0.0) + decision.alpha_k)
        atomic_write_json(self.path, led)

    def _unreadable(self, why: str) -> TrainerError:
        return TrainerError(
            f"the gate ledger {self.path} cannot be read ({why}); it counts app {self.app!r}'s gates so that each "
            f"tests at a smaller alpha. Restore it from a backup, or fix it by hand (the runs' result.json files "
            f"record each gate's k under gate.k); deleting it restarts the count, and with it the app's "
            f"false-promotion guarantee")
