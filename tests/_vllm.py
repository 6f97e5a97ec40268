"""Helpers for tests that talk to a real vLLM through the gateway: a warmed-up vLLM start, SSE parsing, a
client that reads slowly (so a long stream stays in flight as long as the test wants)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Iterator

import httpx

CHAT = [{"role": "user", "content": "What is 2+3?"}]
# ~1 MB of SSE (480 tokens x 20 top logprobs): far more than the socket buffers hold.
LONG_STREAM = {"model": "policy", "messages": CHAT, "max_tokens": 480, "stream": True, "ignore_eos": True,
               "logprobs": True, "top_logprobs": 20}


def start_warm_vllm(model_dir: Path, log_path: Path) -> Any:
    """A vLLM CPU server for `model_dir` serving `policy-v0`, its slow first generation (~30 s of one-time
    warm-up) already paid, so that no test's timing depends on running first. `.warmup_s` says how long."""
    from server import VLLMConfig, start_vllm

    return start_vllm(VLLMConfig(model_dir=model_dir, log_path=log_path, warm_up=True))


def sse_events(lines: list[str]) -> list[Any]:
    """The `data:` payloads of SSE lines."""
    return [line[len("data: "):] for line in lines if line.startswith("data: ")]


def sse_lines(r: httpx.Response) -> Iterator[str]:
    """SSE lines split on "\n" only. httpx's iter_lines also splits on \x85, \u2028, \x1c…, which an
    untrained model's tokens contain unescaped inside JSON strings (JSON does not escape them)."""
    buf = b""
    for chunk in r.iter_bytes():
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode("utf-8").rstrip("\r")
    if buf:
        yield buf.decode("utf-8")


def slow_reader(base_url: str) -> httpx.Client:
    """A client with a 4 KB receive window: while the test does not read, the gateway cannot finish sending a
    long stream (uvicorn pauses on a full socket), so "still in flight" does not depend on how fast vLLM
    generates on a busy machine."""
    transport = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)])
    return httpx.Client(base_url=base_url, timeout=120, transport=transport)
