"""Connecting to a Docker engine: the lazy `docker` import and the errors that say how to fix it.

`docker` (docker-py) is imported only here and only when called, so `import sandboxes` works on a
machine without it. The engine address comes from the environment as docker-py reads it
(`DOCKER_HOST`, default the local unix socket), which is also how remote engines are used.
This module does not start engines; `scripts/setup_docker.sh` does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import _defaults
from .errors import EngineUnavailableError, ImageNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    import docker


def _engine_address(client: Any = None) -> str:
    url = getattr(client, "looplift_engine_url", None)  # set by docker_client(url=...)
    return url or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def _import_docker() -> Any:
    try:
        import docker
    except ImportError as e:  # the [sandboxes] extra is not installed
        raise EngineUnavailableError(
            "the `docker` Python package is not installed; `pip install 'looplift[sandboxes]'` "
            "or use the local backend (--backend local)"
        ) from e
    return docker


def docker_client(timeout: float | None = None, *, url: str | None = None) -> docker.DockerClient:
    """Return a docker-py client for the engine at `url` (default: DOCKER_HOST) that has answered a ping.

    `url` is DOCKER_HOST syntax: unix://, tcp:// (TLS settings from DOCKER_TLS_VERIFY/DOCKER_CERT_PATH, as
    for DOCKER_HOST) or ssh:// (through the system ssh client, like the docker CLI). Raises
    `EngineUnavailableError` with the fix when no engine answers within `timeout` seconds (default
    `_defaults.PING_TIMEOUT_S`; later API calls on the client have no client-side timeout, the sandbox
    enforces its own deadlines).
    """
    docker_py = _import_docker()
    ping_timeout = _defaults.PING_TIMEOUT_S if timeout is None else timeout
    where = url or _engine_address()
    try:
        if url is None:
            client = docker_py.from_env(timeout=ping_timeout)
        else:
            tls = docker_py.utils.kwargs_from_env().get("tls") if url.startswith("tcp://") else None
            client = docker_py.DockerClient(base_url=url, timeout=ping_timeout, tls=tls or False,
                                            use_ssh_client=url.startswith("ssh://"))
        client.ping()
    except Exception as e:  # docker-py raises DockerException, requests errors or OSError here
        raise EngineUnavailableError(
            f"no Docker engine answered at {where} ({type(e).__name__}: {e}); start one with "
            "`dockerd --bridge=none --iptables=false` (or scripts/setup_docker.sh) or use --backend local"
        ) from e
    # Exec streams can legitimately stay silent for the whole command timeout; the sandbox enforces
    # deadlines itself, so the HTTP client must not give up first.
    client.api.timeout = None
    client.looplift_engine_url = where  # our tag, read back with getattr (`client` is Any: imported lazily)
    answered: docker.DockerClient = client
    return answered


def engine_answers(timeout: float | None = None) -> bool:
    """True when a Docker engine answers a ping within `timeout` seconds."""
    try:
        docker_client(timeout).close()
    except EngineUnavailableError:
        return False
    return True


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """True when `tag` names an image on the engine `client` talks to."""
    docker = _import_docker()
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def require_image(client: docker.DockerClient, tag: str) -> None:
    """Raise `ImageNotFoundError` (with the command that builds it) unless `tag` exists."""
    if not image_exists(client, tag):
        raise ImageNotFoundError(
            f"the sandbox image {tag!r} does not exist on the engine at {_engine_address(client)}; build it with "
            f"`looplift sandbox build-image --tag {tag}` (offline, needs root and debootstrap; with DOCKER_HOST set "
            "to that engine), or copy it there with `docker save IMAGE | DOCKER_HOST=URL docker load`"
        )
