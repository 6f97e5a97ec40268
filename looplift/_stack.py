"""The whole stack on one machine: vLLM (one or several replicas), the gateway in front, the collector beside it.

`Stack` is the one place `looplift up`, `looplift demo` and the tests start these parts, as a context
manager: each part is stopped on the way out, in reverse order, however the block ends (an error, a
`Shutdown` signal, Ctrl-C), and a failure while starting a later part stops the earlier ones before the
error propagates, so no vLLM is left running by a half-started stack. vLLM runs tied to this process
(`sdk.infra.spawn_tied`), so even a SIGKILL, which runs no `with` or `finally`, leaves no vLLM behind; the
gateway and the collector are threads and go with the process. The gateway is connected to the collector
once both run (feedback by response id uses it); capture runs from the gateway's first request and journals
what it captures until then (`server._capture`), so nothing served while the collector starts goes
uncaptured. The collector is stopped first, so capture spools what it could not deliver.

Deliberately not here: building the base model (`trainer`), choosing sandboxes, training. Imports of the
component packages are lazy so that `looplift up --model DIR` runs on a `[server]`-only install.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from collector import CollectorSettings
    from server import GatewaySettings, LocalReplica, VLLMServer


class StackError(Exception):
    """The stack cannot start for a reason the user can fix; the message says how."""


@dataclass(frozen=True)
class StackConfig:
    """What to start. Settings objects are built by the caller (`up` reads the environment, the demo
    makes throwaway ones); `collector` None runs without a collector."""

    model_dir: Path
    gateway: GatewaySettings
    collector: Optional[CollectorSettings] = None
    """None for no collector."""
    host: str = "127.0.0.1"
    gateway_port: int = 8000
    collector_port: int = 8100
    vllm_log: Optional[Path] = None
    vllm_args: tuple[str, ...] = ()
    replicas: int = 1
    """Local vLLM servers to start (0 with `upstreams` only); with more than one upstream in all, the gateway
    routes among them and restarts a local one that dies."""
    upstreams: tuple[str, ...] = ()
    """URLs of vLLM servers started elsewhere, added to the local ones."""
    tool_call_parser: Optional[str] = "auto"
    """vLLM's `--tool-call-parser` ("auto": from the model's chat template; None: tool calls off)."""
    insecure: bool = False
    """Serve on a non-loopback `host` without API keys (refused otherwise)."""


class Stack:
    """A running stack; use it as `with Stack(config) as stack:` (or call `start()` / `stop()`)."""

    def __init__(self, config: StackConfig, *, on_vllm_progress: Optional[Callable[[float, str], None]] = None):
        self.config = config
        self._on_progress = on_vllm_progress
        self._exit = contextlib.ExitStack()
        self.vllm: Optional[VLLMServer] = None
        """The first local vLLM, None with only upstreams."""
        self.local: list[LocalReplica] = []
        """Every local replica (its `.server` changes when the gateway restarts it)."""
        # `server.GatewayHandle` and `collector.ServerHandle` once started (None before; `collector` stays None
        # without a collector). Any: the callers read them after `start()` without a None check.
        self.gateway: Any = None
        self.collector: Any = None

    def start(self) -> "Stack":
        """Start vLLM, then the gateway, then the collector; on any failure stop what was started and raise."""
        from server import VLLMConfig, start_gateway_in_thread, start_local_replicas

        cfg = self.config
        if not (Path(cfg.model_dir) / "config.json").is_file():  # say it now, not after vLLM's ~10 s of imports
            raise StackError(f"{cfg.model_dir} is not a Hugging Face model directory (no config.json); if it is "
                             "looplift's cached base model, delete that directory and run again to rebuild it")
        try:
            from server import check_bind

            check_bind(cfg.host, cfg.gateway.api_keys, insecure=cfg.insecure)  # before the ~40 s of vLLM
            if cfg.replicas:
                # Started with the generation config the gateway records on captured turns and announces.
                self.local = start_local_replicas(VLLMConfig(model_dir=cfg.model_dir, port=0, log_path=cfg.vllm_log,
                                                             extra_args=cfg.vllm_args,
                                                             tool_call_parser=cfg.tool_call_parser,
                                                             generation_config=cfg.gateway.generation_config),
                                                  cfg.replicas, progress=self._on_progress)
                for replica in self.local:
                    self._exit.callback(replica.stop)
            self.vllm = self.local[0].server if self.local else None
            upstreams: list[str | LocalReplica] = [*self.local, *cfg.upstreams]
            if not upstreams:
                raise StackError("nothing to serve: start at least one local vLLM (--replicas) or give --upstream")
            # With a collector to come, /health says "degraded" until it is connected, never "ok" before.
            gateway_settings = dataclasses.replace(cfg.gateway, await_collector=cfg.collector is not None)
            self.gateway = start_gateway_in_thread(gateway_settings, upstreams if len(upstreams) > 1 else upstreams[0],
                                                   cfg.host, cfg.gateway_port, insecure=cfg.insecure)
            self._exit.callback(self.gateway.stop)
            if cfg.collector is not None:
                from pydantic import SecretStr

                from collector import serve_in_thread

                # The dashboard reads versions, swaps and health from this gateway with its admin token.
                collector = cfg.collector.model_copy(update={"gateway_url": self.gateway.url,
                                                             "admin_token": SecretStr(cfg.gateway.admin_token)})
                self.collector = serve_in_thread(collector, cfg.host, cfg.collector_port)
                self._exit.callback(self.collector.stop)
                # Capture and feedback by response id talk to this collector.
                self.gateway.app.connect_collector(self.collector.url,
                                                   collector.api_keys[0] if collector.api_keys else None)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every started part, last started first (idempotent)."""
        self._exit.close()

    def __enter__(self) -> "Stack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
