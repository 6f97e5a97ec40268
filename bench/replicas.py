"""Replicas benchmark: throughput through the gateway over 1 and over 2 vLLM replicas, and what routing costs.

    .venv/bin/python bench/replicas.py [--rounds 6] [--requests 64] [--concurrency 16] [--max-tokens 16]
                                       [--n 200] [--json-out bench/results/replicas.json]

One run, on this machine:

1. Two real vLLM CPU servers (A, B) for the tiny untrained model, started like `looplift up --replicas 2`
   starts them (`server.start_vllm`, warm-up paid before anything is timed). `--placement split` (the default,
   what `looplift up --replicas N` does: `server._vllm.replica_env`) gives each its own cores (here: one each,
   so `gw1` is one replica on one core); `--placement shared` leaves both on every core (vLLM's default binding).
2. Three targets, each gateway in its own child process (bench/gateway.py's `--serve-gateway`, the production
   start-up path): `direct` (vLLM A, no gateway), `gw1` (the gateway over A alone: the single-upstream path,
   no routing code) and `gw2` (the gateway over A and B: `ReplicaSet` routing, least outstanding).
3. Throughput: rounds of `--requests` non-streaming chat completions (`max_tokens` fixed, `ignore_eos`) sent by
   `--concurrency` workers, one target per round, the order reversed every round (ABC CBA ...), so drift and
   other work on the machine land on every target; requests/s per round, the median over rounds reported,
   and gw2/gw1 in the same run.
4. Routing overhead at concurrency 1: `--n` interleaved rounds of one request per target; p50/p99 latency,
   gw2 - gw1 (the routing), gw1 - direct (the single-upstream gateway, as bench/gateway.py measures it), and
   each gateway's CPU per request from /proc (every thread's schedstat).

What 2 cores allow: vLLM's CPU build runs its model on the cores it is bound to with OpenMP threads that spin;
two replicas bound to the same two cores fight over them, and one core per replica is the most a replica can
get here. The numbers say what each placement gives; on a machine with a GPU (or cores) per replica, the
replicas add capacity.
Writes bench/results/replicas.json; the load average before and after is recorded (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from rich.table import Table  # noqa: E402

from sdk.infra import atomic_write_json  # noqa: E402

sys.path.insert(1, str(ROOT / "bench"))
from gateway import CHAT, Child, Target, one, pct, run_c1, tiny_model_home, wide_console  # noqa: E402


@dataclass
class Throughput:
    target: str
    rounds: int
    requests_per_round: int
    rps_median: float
    rps_min: float
    rps_max: float
    latency_p50_ms: float
    latency_p99_ms: float


@dataclass
class Latency:
    target: str
    n: int
    p50_ms: float
    p99_ms: float
    cpu_ms_per_request: Optional[float]


async def throughput(session: aiohttp.ClientSession, targets: list[Target], body: dict[str, Any], concurrency: int,
                     requests: int, rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """{target: (requests/s per round, latencies s)}."""
    out: dict[str, tuple[list[float], list[float]]] = {t.name: ([], []) for t in targets}

    async def round_(t: Target) -> None:
        left = list(range(requests))
        lat = out[t.name][1]

        async def worker() -> None:
            while left:
                left.pop()
                lat.append((await one(session, t.url, t.model, body)).total_s)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        out[t.name][0].append(requests / (time.perf_counter() - t0))

    for r in range(rounds):
        for t in targets if r % 2 == 0 else targets[::-1]:
            await round_(t)
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="throughput rounds per target")
    ap.add_argument("--requests", type=int, default=64, help="requests per throughput round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--n", type=int, default=200, help="c=1 rounds (one request per target each)")
    ap.add_argument("--placement", choices=("split", "shared"), default="split",
                    help="split: each replica on its own cores (looplift up's default); shared: both on every core")
    ap.add_argument("--json-out", type=Path, default=ROOT / "bench" / "results" / "replicas.json")
    args = ap.parse_args(argv)

    from server import VLLMConfig, start_vllm
    from server._vllm import replica_env

    console = wide_console()
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    with tiny_model_home(console, "bench-replicas-") as (home, model):
        vllms: list[Any] = []
        children: dict[str, Child] = {}
        try:
            for i, name in enumerate(("a", "b")):
                env = replica_env(i, 2) if args.placement == "split" else {}
                with console.status(f"starting vLLM {name} {env} (and its one-time warm-up)"):
                    vllms.append(start_vllm(VLLMConfig(model_dir=model, log_path=home / f"vllm-{name}.log",
                                                       warm_up=True, env=env)))
            a, b = vllms
            children["gw1"] = Child("--serve-gateway", a.url, str(home / "state1"))
            children["gw2"] = Child("--serve-gateway", f"{a.url},{b.url}", str(home / "state2"))
            targets = [Target("direct", a.url, "policy-v0"), Target("gw1", children["gw1"].url, "policy"),
                       Target("gw2", children["gw2"].url, "policy")]
            body = {"messages": CHAT, "max_tokens": args.max_tokens, "ignore_eos": True}
            c1_body = {**body, "max_tokens": 4}
            tp_rows: list[Throughput] = []
            lat_rows: list[Latency] = []

            async def measure() -> None:
                conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0)
                async with aiohttp.ClientSession(connector=conn) as s:
                    await throughput(s, targets, body, args.concurrency, args.concurrency * 2, 1)  # warm paths + B
                    await run_c1(s, targets, c1_body, 10)
                    with console.status(f"throughput: {args.rounds} rounds x {args.requests} requests per target"):
                        tp = await throughput(s, targets, body, args.concurrency, args.requests, args.rounds)
                    for t in targets:
                        rps, lat = tp[t.name]
                        ms = [x * 1000 for x in lat]
                        tp_rows.append(Throughput(t.name, args.rounds, args.requests, statistics.median(rps), min(rps),
                                                  max(rps), statistics.median(ms), pct(ms, 99)))
                    with console.status(f"latency at c=1: {args.n} rounds of {len(targets)}"):
                        c0 = {k: c.cpu_ns() for k, c in children.items()}
                        res = await run_c1(s, targets, c1_body, args.n)
                        cpu = {k: (c.cpu_ns() - c0[k]) / 1e6 / args.n for k, c in children.items()}
                    for t in targets:
                        ms = [x.total_s * 1000 for x in res[t.name]]
                        lat_rows.append(Latency(t.name, len(ms), statistics.median(ms), pct(ms, 99), cpu.get(t.name)))

            asyncio.run(measure())
        finally:
            for c in children.values():
                c.stop()
            for v in vllms:
                v.stop()
    elapsed = time.perf_counter() - t_start
    tp_by = {r.target: r for r in tp_rows}
    lat_by = {r.target: r for r in lat_rows}
    ratios = {
        "throughput_gw2_over_gw1": tp_by["gw2"].rps_median / tp_by["gw1"].rps_median,
        "throughput_gw1_over_direct": tp_by["gw1"].rps_median / tp_by["direct"].rps_median,
        "routing_added_p50_ms_c1": lat_by["gw2"].p50_ms - lat_by["gw1"].p50_ms,
        "gateway_added_p50_ms_c1": lat_by["gw1"].p50_ms - lat_by["direct"].p50_ms,
        "routing_cpu_ms_per_request": (lat_by["gw2"].cpu_ms_per_request or 0) - (lat_by["gw1"].cpu_ms_per_request or 0),
    }
    t = Table(title=f"placement {args.placement}: throughput, c={args.concurrency}, {args.requests} non-stream requests "
              f"x {args.rounds} rounds per target, max_tokens {args.max_tokens} (median of rounds)")
    for col in ("target", "req/s", "min", "max", "p50 ms", "p99 ms"):
        t.add_column(col, justify="left" if col == "target" else "right")
    for r in tp_rows:
        t.add_row(r.target, f"{r.rps_median:.2f}", f"{r.rps_min:.2f}", f"{r.rps_max:.2f}", f"{r.latency_p50_ms:.1f}",
                  f"{r.latency_p99_ms:.1f}")
    console.print(t)
    t2 = Table(title=f"latency at c=1, {args.n} interleaved rounds, max_tokens 4")
    for col in ("target", "p50 ms", "p99 ms", "gateway CPU ms/request"):
        t2.add_column(col, justify="left" if col == "target" else "right")
    for lr in lat_rows:
        t2.add_row(lr.target, f"{lr.p50_ms:.2f}", f"{lr.p99_ms:.2f}",
                   "" if lr.cpu_ms_per_request is None else f"{lr.cpu_ms_per_request:.3f}")
    console.print(t2)
    console.print(f"2 replicas / 1 replica throughput: {ratios['throughput_gw2_over_gw1']:.2f}x; routing adds "
                  f"{ratios['routing_added_p50_ms_c1']:+.2f} ms p50 at c=1 ({ratios['routing_cpu_ms_per_request']:+.3f} ms "
                  f"gateway CPU/request); single-upstream gateway adds {ratios['gateway_added_p50_ms_c1']:+.2f} ms p50; "
                  f"{os.cpu_count()} cores; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
                  f"took {elapsed:.0f} s")
    atomic_write_json(args.json_out, {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_avg_before": load_before, "load_avg_after": os.getloadavg()},
        "config": vars(args) | {"json_out": str(args.json_out)},
        "throughput": [asdict(r) for r in tp_rows],
        "latency_c1": [asdict(r) for r in lat_rows],
        "ratios": ratios,
        "seconds": round(elapsed, 1),
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    })
    console.print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
