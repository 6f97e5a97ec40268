"""Who may use — and teach — the model: API keys, their public ids, and where the gateway may listen.

Captured traffic and feedback become training data, so an open endpoint is a way to poison the model.
Three rules follow:

* **Keys have ids.** A key is a secret; its id (`k-` + the first 12 hex digits of its sha256) is not, and
  is what captured trajectories and feedback record (`metadata.key_id`, `feedback.key_id`), so one key's
  data can be excluded from export or purged (`collector purge --where key_id=k-...`) without the key ever
  being stored. 48 bits of a hash of a random key say nothing about the key.
* **With keys configured, only authenticated requests are served, captured or accepted as feedback.**
  (`KeyRing.match` compares against every key in constant time.)
* **No open, unauthenticated endpoint by accident.** `check_bind` refuses a non-loopback address when no
  API keys are set, unless the operator passes `--insecure` (`insecure=True`) knowing that anyone who
  reaches it can use the model and, with capture on, teach it.

Deliberately not here: per-key rate limits or scopes, key rotation (restart with the new key list), TLS
(put a proxy in front).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from typing import Iterable, Optional

# The one parser of `Authorization: Bearer` for every service; re-exported because `_gateway` imports it from here.
from sdk.wire import bearer_token as bearer_token

from . import _defaults as D
from .errors import InsecureBindError


def key_id(key: str) -> str:
    """The public id of API key `key`: `k-` + 12 hex digits of its sha256."""
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:12]


class KeyRing:
    """The configured client API keys and their ids."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = [(k.encode(), key_id(k)) for k in keys]

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def ids(self) -> list[str]:
        """The ids of the configured keys."""
        return [kid for _, kid in self._keys]

    def match(self, authorization: Optional[str]) -> Optional[str]:
        """The id of the key an `Authorization` header value carries, or None (no key, or not one of ours).
        Every configured key is compared, in constant time, whichever matches."""
        token = bearer_token(authorization)
        if token is None:
            return None
        given = token.encode()
        found = None
        for key, kid in self._keys:
            if hmac.compare_digest(given, key):
                found = kid
        return found


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves only this machine (every address it resolves to is loopback)."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def check_bind(host: str, api_keys: Iterable[str], *, insecure: bool = False) -> None:
    """Raise `InsecureBindError` when `host` is reachable from other machines, no API key is set, and
    `insecure` was not given."""
    if insecure or is_loopback(host) or any(True for _ in api_keys):
        return
    raise InsecureBindError(
        f"refusing to serve the gateway on {host!r} without API keys: anyone who can reach it could use the model "
        "and, with capture or feedback on, put their own data into its training set. Set "
        f"{D.API_KEYS_ENV}=key1,key2 (clients send 'Authorization: Bearer <key>'), bind 127.0.0.1, or pass "
        "--insecure if this network is trusted"
    )
