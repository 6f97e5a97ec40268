"""Capture benchmark: what capturing traffic adds to a gateway request, and that a collector outage fails none.

    .venv/bin/python bench/capture.py [--n 300] [--rounds 16] [--outage-s 6] [--json-out bench/results/capture.json]

One run, on this machine (the tools of `bench/gateway.py`, whose docstring explains the method):

1. One real vLLM CPU server for the tiny untrained model, warmed up; a collector (SQLite, an API key) in a
   child process on a fixed port; two gateways in child processes in front of the same vLLM, started the
   production way (`server.start_gateway_in_thread`): `off` (no capture) and `on` (`capture=True`,
   delivering to the collector, spooling under its state directory).
2. The same chat completions (`max_tokens` small, `ignore_eos`) to both gateways, interleaved at
   concurrency 1 (`n` rounds, each gateway taking each place in turn) and in alternating rounds of 16
   workers, non-stream and stream. Added by capture = `on` percentile - `off` percentile, same run. The CPU
   time of each gateway process per request (/proc schedstat, every thread) says what capture costs the
   gateway itself; the collector's ingest (anonymizing most of all) runs on the same 2 cores as vLLM here,
   so at c=16 its work shows up in every column's latency, `off` included.
3. The outage: 16 workers keep sending to `on` while the collector is SIGKILLed, stays down `--outage-s`
   seconds and is started again on the same port. Every request must still answer 200 (failed requests
   are counted, exceptions included); meanwhile the capture spools to disk and replays when the collector
   answers again.
4. Afterwards: every exchange `on` answered must be in the collector (one trajectory each, no session
   header), read back from `GET /v1/stats`; the capture metrics from the gateway's `/metrics`.

Target (issue 9): <= 1 ms p50 added at concurrency 1, and 0 failed requests during the outage. Writes
bench/results/capture.json. The machine is shared (2 cores): other work shows up as noise in every column;
the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import aiohttp
import httpx
from gateway import (CHAT, ROOT, Child, Sample, Target, latencies, load_parser, run_c1, run_cn, tiny_model_home,
                     wide_console, write_results)
from rich.console import Console
from rich.table import Table


TARGET_ADDED_P50_MS = 1.0
KEY = "bench-collector-key"


def serve_gateway(vllm_url: str, state_dir: str, collector_url: str) -> None:
    """Child process: a gateway, capturing into `collector_url` unless it is "-", until stdin closes."""
    from server import GatewaySettings, start_gateway_in_thread

    capture = collector_url != "-"
    settings = GatewaySettings(admin_token="bench-admin", state_dir=Path(state_dir), capture=capture,
                               collector_url=collector_url if capture else None, collector_key=KEY)
    with start_gateway_in_thread(settings, vllm_url, port=0) as gw:
        print(gw.port, flush=True)
        sys.stdin.read()


def serve_collector(db_url: str, port: str) -> None:
    """Child process: the collector on `port` until stdin closes (or it is killed)."""
    from collector import CollectorSettings, serve_in_thread

    with serve_in_thread(CollectorSettings(db_url=db_url, api_keys=(KEY,)), "127.0.0.1", int(port)) as col:
        print(col.port, flush=True)
        sys.stdin.read()


@dataclass
class Row:
    mode: str
    concurrency: int
    n: int
    off_p50_ms: float
    off_p99_ms: float
    on_p50_ms: float
    on_p99_ms: float
    #: on - off
    added_p50_ms: float
    added_p99_ms: float
    #: CPU time of each gateway process (all threads: the capture worker and its collector client included)
    #: over the mode and a one-second settle after it, per request
    off_cpu_ms_per_request: float
    on_cpu_ms_per_request: float


def row(mode: str, c: int, res: dict[str, list[Sample]], cpu_ns: dict[str, int]) -> Row:
    ms, p50, p99 = latencies(res)
    n = len(ms["on"])
    return Row(mode, c, n, p50["off"], p99["off"], p50["on"], p99["on"], p50["on"] - p50["off"],
               p99["on"] - p99["off"], cpu_ns["off"] / 1e6 / n, cpu_ns["on"] / 1e6 / n)


def render(console: Console, rows: list[Row]) -> None:
    t = Table(title="gateway with capture on vs off, same vLLM, same run (ms; +added = on - off)")
    for col in ("mode", "c", "n", "off p50", "on p50", "+p50", "off p99", "on p99", "+p99", "CPU/req off", "on"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for r in rows:
        ok = r.concurrency != 1 or r.added_p50_ms <= TARGET_ADDED_P50_MS
        t.add_row(r.mode, str(r.concurrency), str(r.n), f"{r.off_p50_ms:.2f}", f"{r.on_p50_ms:.2f}",
                  f"[{'green' if ok else 'red'}]{r.added_p50_ms:+.2f}[/]", f"{r.off_p99_ms:.2f}", f"{r.on_p99_ms:.2f}",
                  f"{r.added_p99_ms:+.2f}", f"{r.off_cpu_ms_per_request:.3f}", f"{r.on_cpu_ms_per_request:.3f}")
    console.print(t)


async def outage(session: aiohttp.ClientSession, target: Target, body: dict[str, Any], concurrency: int,
                 before_s: float, down_s: float, after_s: float, kill: Any, restart: Any) -> dict[str, Any]:
    """Keep `concurrency` workers busy on `target` while the collector is killed and restarted."""
    ok = failed = 0
    errors: list[str] = []
    stop = False

    async def worker() -> None:
        nonlocal ok, failed
        while not stop:
            try:
                async with session.post(f"{target.url}/v1/chat/completions", json={**body, "model": target.model}) as r:
                    await r.read()
                    if r.status == 200:
                        ok += 1
                        continue
                    failed += 1
                    errors.append(f"HTTP {r.status}")
            except aiohttp.ClientError as e:
                failed += 1
                errors.append(type(e).__name__)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(before_s)
    kill()
    killed_at = ok + failed
    await asyncio.sleep(down_s)
    t0 = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, restart)
    restart_s = time.monotonic() - t0
    restarted_at = ok + failed
    await asyncio.sleep(after_s)
    stop = True
    await asyncio.gather(*tasks)
    return {"requests": ok + failed, "ok": ok, "failed": failed, "errors": sorted(set(errors))[:10],
            "requests_while_down": restarted_at - killed_at, "collector_restart_s": round(restart_s, 2)}


def capture_metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("looplift_gateway_capture"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: Optional[list[str]] = None) -> int:
    ap = load_parser(__doc__)
    ap.add_argument("--outage-s", type=float, default=6.0, help="seconds the collector stays down")
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "capture.json")
    ap.add_argument("--serve-gateway", nargs=3, metavar=("VLLM_URL", "STATE_DIR", "COLLECTOR_URL"), help=argparse.SUPPRESS)
    ap.add_argument("--serve-collector", nargs=2, metavar=("DB_URL", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_gateway:
        serve_gateway(*args.serve_gateway)
        return 0
    if args.serve_collector:
        serve_collector(*args.serve_collector)
        return 0

    from server import VLLMConfig, start_vllm

    console = wide_console()
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    me = str(Path(__file__).resolve())
    with tiny_model_home(console, "bench-capture-") as (home, model):
        with console.status("starting vLLM and paying its first generation (one-time warm-up)"):
            vllm = start_vllm(VLLMConfig(model_dir=model, log_path=home / "vllm.log", warm_up=True))
        db, port = f"sqlite:///{home / 'collector.db'}", str(free_port())
        children: dict[str, Child] = {}
        try:
            children["collector"] = Child("--serve-collector", db, port, script=me)
            children["off"] = Child("--serve-gateway", vllm.url, str(home / "off"), "-", script=me)
            children["on"] = Child("--serve-gateway", vllm.url, str(home / "on"), children["collector"].url, script=me)
            targets = [Target("off", children["off"].url, "policy"), Target("on", children["on"].url, "policy")]
            base = {"messages": CHAT, "max_tokens": args.max_tokens, "ignore_eos": True}
            rows: list[Row] = []
            sent_on = 0

            def kill() -> None:
                children["collector"].proc.send_signal(signal.SIGKILL)
                children["collector"].proc.wait()

            def restart() -> None:
                children["collector"] = Child("--serve-collector", db, port, script=me)

            def cpu() -> dict[str, int]:
                return {k: children[k].cpu_ns() for k in ("off", "on")}

            async def measure() -> dict[str, Any]:
                nonlocal sent_on
                conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0)
                async with aiohttp.ClientSession(connector=conn) as s:
                    for body in (base, {**base, "stream": True}):  # warm both paths, and vLLM's batches
                        sent_on += len((await run_c1(s, targets, body, 10))["on"])
                        sent_on += len((await run_cn(s, targets, body, args.concurrency, 2, 1))["on"])
                    for mode, body in (("non-stream", base), ("stream", {**base, "stream": True})):
                        for c in (1, args.concurrency):
                            with console.status(f"{mode}, c={c}"):
                                c0 = cpu()
                                res = await (run_c1(s, targets, body, args.n) if c == 1 else
                                             run_cn(s, targets, body, c, args.per_worker, args.rounds))
                                await asyncio.sleep(1.0)  # the capture worker and its client finish this mode's work
                                rows.append(row(mode, c, res, {k: v - c0[k] for k, v in cpu().items()}))
                                sent_on += len(res["on"])
                    with console.status(f"collector killed for {args.outage_s:.0f} s under c={args.concurrency}"):
                        out = await outage(s, targets[1], base, args.concurrency, 3.0, args.outage_s, 5.0, kill,
                                           restart)
                    sent_on += out["ok"]
                    return out

            down = asyncio.run(measure())
            render(console, rows)
            # Every exchange `on` answered must reach the collector (replayed from the spool included).
            stored, t0 = -1, time.monotonic()
            while time.monotonic() - t0 < 120:
                stored = httpx.get(f"{children['collector'].url}/v1/stats",
                                   headers={"Authorization": f"Bearer {KEY}"}).json()["total"]
                if stored >= sent_on:
                    break
                time.sleep(1.0)
            down.update(captured_sent=sent_on, stored=stored, delivered_after_s=round(time.monotonic() - t0, 1),
                        gateway_metrics=capture_metrics(children["on"].url))
        finally:
            while children:
                children.popitem()[1].stop()
            vllm.stop()
    elapsed = time.perf_counter() - t_start
    added = next(r.added_p50_ms for r in rows if (r.mode, r.concurrency) == ("non-stream", 1))
    console.print(f"capture adds {added:+.2f} ms p50 at c=1 (non-stream; target <= {TARGET_ADDED_P50_MS} ms: "
                  f"{'met' if added <= TARGET_ADDED_P50_MS else 'missed'}); outage: {down['failed']} failed of {down['requests']} requests "
                  f"({down['requests_while_down']} while the collector was down), {down['stored']}/{down['captured_sent']} "
                  f"exchanges stored; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
                  f"took {elapsed:.0f} s")
    write_results(console, args.json_out, load_before, elapsed,
                  {"n": args.n, "concurrency": args.concurrency, "per_worker": args.per_worker, "rounds": args.rounds,
                   "max_tokens": args.max_tokens, "outage_s": args.outage_s},
                  target_added_p50_ms_c1=TARGET_ADDED_P50_MS, results=[asdict(r) for r in rows], outage=down)
    return 0 if down["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
