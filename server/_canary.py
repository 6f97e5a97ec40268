"""The canary split: which alias requests the candidate answers while a canary runs.

A canary sends `fraction` of the alias's requests to a candidate version instead of the serving one:

* with an `X-Looplift-Session` header the choice is a hash of (candidate, session), so every turn of an
  episode (and every retry) lands on the same version, and a trajectory is never half one version, half
  the other; a later canary of another version draws its own sessions;
* without one, each request is a fresh draw (`random.random()`).

The hash is blake2b (8 bytes) read as a number in [0, 1): uniform enough that 10% of sessions means 10%
(tests/test_canary.py measures it on 20,000 sessions). The choice costs one hash per alias request and
only while a canary runs; requests naming a version directly are never split.

Deliberately not here: deciding anything (the trainer's canary watch compares the live outcomes and calls
the admin API), starting, ending and persisting the canary (`_canary_state`, inside the registry: saved in
`registry.json` and resumed after a restart), and sticky routing by API key or client address (the session
header is the one the capture stitches by).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from ._models import CanaryInfo

_SCALE = float(2**64)


def session_point(version: str, session: str) -> float:
    """Where `session` falls in [0, 1) for a canary of `version` (stable across processes and restarts)."""
    digest = hashlib.blake2b(session.encode(), digest_size=8, key=version.encode()[:64]).digest()
    return int.from_bytes(digest, "big") / _SCALE


@dataclass
class Canary:
    """A running canary: the candidate, its share of alias traffic, and how many requests went each way."""

    version: str
    fraction: float
    started_at: datetime
    routed_candidate: int = 0
    routed_serving: int = 0

    def takes(self, session: Optional[str]) -> bool:
        """Whether the candidate answers this alias request (and count it on its side)."""
        point = random.random() if session is None else session_point(self.version, session)
        if point < self.fraction:
            self.routed_candidate += 1
            return True
        self.routed_serving += 1
        return False

    def info(self) -> CanaryInfo:
        """The admin API's view of it."""
        return CanaryInfo(version=self.version, fraction=self.fraction, started_at=self.started_at,
                          routed_candidate=self.routed_candidate, routed_serving=self.routed_serving)
