"""Capacity model: what each part of looplift needs for a load (default 1 M episodes a day), from measurements.

    .venv/bin/python bench/capacity.py [--episodes-per-day 1e6] [--turns 4] [--model-params-b 8] [--gpu h100]
                                       [--replica-decode-tokens-per-s N] [--json]

Every per-core and per-request figure is read from `bench/results/*.json` when the script runs, and printed
with the file and key it came from, so the table follows the latest benchmark runs:

    gateway      CPU ms per proxied request        bench/results/gateway.json    (bench/gateway.py)
                 (c=16; the dearer of stream and non-stream)
    collector    trajectories per CPU-second       bench/results/collector.json  (bench/collector.py)
                 mean trajectory bytes
    sandboxes    warm acquire+exec latency, exec/s  bench/results/sandboxes.json  (bench/sandboxes.py)
                 per core

What is NOT measured here is said so in the table: this project's machines have no GPU vLLM, so a vLLM
replica's throughput is a roofline ESTIMATE (decode bound by reading the weights and the KV cache from HBM
once per step, prefill by FLOPs at a stated utilization) unless `--replica-decode-tokens-per-s` gives a
measured figure (e.g. from `vllm bench serve` on the target GPU). The load's shape (turns, tokens, peak factor,
time the model takes per turn) is an input with a stated default, not a measurement.

The model, per component (peak rate = mean rate x --peak-factor; every pool is sized to --utilization):
  * gateway cores       = peak requests/s x CPU s per request / utilization (requests = episodes x turns)
  * collector workers   = peak trajectories/s / (trajectories per CPU-second) / utilization, one core each;
    Postgres writes       = peak trajectories/s rows/s and x mean bytes; storage = episodes/day x bytes x days
  * sandboxes           = episodes in flight (Little's law: peak episodes/s x episode seconds), one sandbox per
    episode for its whole life; hosts = max(by capacity: sandboxes / per-host capacity, where capacity is the
    pool's own rule (sandboxes._engines.reported_capacity), by exec CPU: peak execs/s / measured exec/s per core)
  * vLLM replicas       = peak prefill tokens/s / prefill capacity + peak decode tokens/s / decode capacity,
    over utilization (prefill and decode share a replica's time)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench/sandboxes.py must not shadow the package

#: HBM bandwidth (bytes/s) and dense bf16 FLOP/s of one GPU, from the vendors' data sheets.
GPUS = {
    "a100": (2.0e12, 312e12),
    "h100": (3.35e12, 989e12),
    "h200": (4.8e12, 989e12),
    "b200": (8.0e12, 2250e12),
}


@dataclass
class Figure:
    """A measured figure and where it was read from."""

    value: float
    source: str  # "file:key"


@dataclass
class Row:
    component: str
    needs: str
    number: Optional[float]
    """None: not measured (the basis says what to run)."""
    unit: str
    basis: list[str] = field(default_factory=list)
    """How it was computed, each measured input cited as file:key=value."""
    measured: bool = True


#: Where the measurements are read from (`--results`).
RESULTS = ROOT / "bench" / "results"


def _load(name: str) -> Optional[dict[str, Any]]:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def gateway_cpu_ms() -> Optional[Figure]:
    """CPU milliseconds the gateway spends per request: at concurrency 16 if measured, else 1; the dearer of
    streamed and non-streamed (the traffic mix is not known here)."""
    data = _load("gateway.json")
    if data is None:
        return None
    rows = data.get("results", [])
    for c in (16, 1):
        found = [(float(r["gateway_cpu_ms_per_request"]), i, r.get("mode")) for i, r in enumerate(rows)
                 if r.get("concurrency") == c and r.get("gateway_cpu_ms_per_request") is not None]
        if found:
            ms, i, mode = max(found)
            return Figure(ms, f"gateway.json:results[{i}]({mode},c={c}).gateway_cpu_ms_per_request")
    return None


def collector_figures() -> tuple[Optional[Figure], Optional[Figure]]:
    """(trajectories ingested per CPU-second, mean trajectory bytes)."""
    data = _load("collector.json")
    if data is None:
        return None, None
    per_cpu = Figure(float(data["ingest"]["per_cpu_s"]), "collector.json:ingest.per_cpu_s")
    size = Figure(float(data["mean_trajectory_bytes"]), "collector.json:mean_trajectory_bytes")
    return per_cpu, size


def sandbox_figures() -> tuple[Optional[Figure], Optional[Figure]]:
    """(seconds per warm acquire+exec, exec/s per core)."""
    data = _load("sandboxes.json")
    if data is None:
        return None, None
    warm = tput = None
    cores = float(data["machine"]["cores"])
    for i, r in enumerate(data["results"]):
        if r["metric"].startswith("warm acquire+exec p50") and r["value"] is not None:
            warm = Figure(float(r["value"]), f"sandboxes.json:results[{i}].value ({r['metric']})")
        if r["metric"].startswith("throughput") and r["value"] is not None:
            tput = Figure(float(r["value"]) / cores, f"sandboxes.json:results[{i}].value ({r['metric']}) "
                                                     f"/ machine.cores {cores:g}")
    return warm, tput


def plan(a: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """The table for the load `a` describes."""
    from sandboxes import SandboxConfig
    from sandboxes._engines import reported_capacity

    mean_eps = a.episodes_per_day / 86400
    peak_eps = mean_eps * a.peak_factor
    u = a.utilization
    rows: list[Row] = []
    load = {"episodes_per_day": a.episodes_per_day, "mean_episodes_per_s": mean_eps, "peak_episodes_per_s": peak_eps,
            "peak_factor": a.peak_factor, "turns_per_episode": a.turns, "execs_per_episode": a.execs,
            "prompt_tokens_per_episode": a.prompt_tokens, "completion_tokens_per_episode": a.completion_tokens,
            "prefix_cache_hit": a.prefix_cache_hit, "utilization": u, "model_params_b": a.model_params_b, "gpu": a.gpu}

    # ---- gateway
    req_s = peak_eps * a.turns
    g = gateway_cpu_ms()
    if g is None:
        rows.append(Row("gateway", "cores", None, "cores", [
            f"peak {req_s:,.0f} requests/s; no gateway measurement in bench/results/gateway.json: run bench/gateway.py"],
            measured=False))
    else:
        cores = req_s * g.value / 1000 / u
        rows.append(Row("gateway", "cores", cores, "cores", [
            f"peak {req_s:,.0f} requests/s x {g.source}={g.value:.3f} ms / utilization {u:g}"]))

    # ---- collector + Postgres
    per_cpu, size = collector_figures()
    if per_cpu is not None and size is not None:
        # The bench ingests trajectories of one size; a bigger one costs proportionally more CPU (the anonymizer
        # scans all of its text) -- an assumption, stated in the row.
        nbytes = a.trajectory_bytes or size.value
        scale = nbytes / size.value
        size_basis = (f"{size.source}={size.value:,.0f} B" if a.trajectory_bytes is None else
                      f"--trajectory-bytes {nbytes:,.0f} (an input; measured at {size.source}={size.value:,.0f} B)")
        cores = peak_eps / per_cpu.value * scale / u
        rows.append(Row("collector", "ingest workers (1 core each)", max(2, math.ceil(cores)), "workers", [
            f"peak {peak_eps:,.1f} trajectories/s / {per_cpu.source}={per_cpu.value:,.0f} per CPU-s"
            + (f" x {scale:.2f} (size ratio; cost taken as linear in bytes)" if a.trajectory_bytes else "")
            + f" / utilization {u:g} = {cores:.2f} cores (anonymizing is most of it); 2 for availability"]))
        rows.append(Row("postgres", "write rate", peak_eps, "rows/s", [
            f"one row per trajectory at peak; x {size_basis} = {peak_eps * nbytes / 1e6:.2f} MB/s"]))
        rows.append(Row("postgres", f"storage for {a.retention_days} days", a.episodes_per_day * nbytes
                        * a.retention_days / 1e9, "GB", [
            f"{a.episodes_per_day:,.0f}/day x {size_basis} x {a.retention_days} days (`collector purge --older-than` "
            "bounds it); the bench's trajectories are synthetic text of that size: one that keeps per-turn token ids "
            "and logprobs is several times larger, so pass --trajectory-bytes measured on your own (table size / rows)"]))

    # ---- vLLM (estimate unless measured)
    bw, flops = GPUS[a.gpu]
    params = a.model_params_b * 1e9
    weights = params * a.dtype_bytes
    kv_per_token = a.kv_bytes_per_token or params / 1e9 * 16_384  # ~16 KiB per B params (GQA-era models, bf16)
    ctx = (a.prompt_tokens + a.completion_tokens) / a.turns  # tokens of context a decoding sequence holds, on average
    batch = a.batch
    gpus = a.replica_gpus
    if a.replica_decode_tokens_per_s:
        decode_cap = a.replica_decode_tokens_per_s
        decode_basis = f"--replica-decode-tokens-per-s {decode_cap:,.0f} (measured by you)"
        measured = True
    else:
        step_s = (weights + batch * ctx * kv_per_token) / (bw * gpus * a.bandwidth_efficiency)
        decode_cap = batch / step_s
        decode_basis = (f"ESTIMATE, not measured (no GPU vLLM here): batch {batch} / step, step = (weights "
                        f"{weights / 1e9:.0f} GB + KV {batch} x {ctx:,.0f} tokens x {kv_per_token / 1024:.0f} KiB) / "
                        f"({gpus} x {a.gpu.upper()} {bw / 1e12:.2f} TB/s x {a.bandwidth_efficiency:g}) = "
                        f"{step_s * 1000:.1f} ms -> {decode_cap:,.0f} tokens/s")
        measured = False
    prefill_cap = flops * gpus * a.mfu / (2 * params)
    prefill_load = peak_eps * a.prompt_tokens * (1 - a.prefix_cache_hit)
    decode_load = peak_eps * a.completion_tokens
    busy = prefill_load / prefill_cap + decode_load / decode_cap
    replicas = max(1, math.ceil(busy / u))
    rows.append(Row("vllm", f"replicas ({gpus} x {a.gpu.upper()} each, {a.model_params_b:g}B bf16)", replicas,
                    "replicas", [
                        f"prefill {prefill_load:,.0f} tokens/s ({a.prefix_cache_hit:.0%} of prompt tokens from the prefix "
                        f"cache) / {prefill_cap:,.0f} per replica (2 x params FLOPs per token at {a.mfu:g} of "
                        f"{flops / 1e12:.0f} TFLOP/s) = {prefill_load / prefill_cap:.2f}",
                        f"decode {decode_load:,.0f} tokens/s / {decode_cap:,.0f} per replica = {decode_load / decode_cap:.2f}"
                        f"; {decode_basis}",
                        f"({busy:.2f} replica-equivalents busy) / utilization {u:g}"], measured=measured))

    # ---- sandboxes
    warm, per_core = sandbox_figures()
    turn_s = a.completion_tokens / a.turns / a.sequence_tokens_per_s
    exec_s = warm.value if warm is not None else 0.0
    episode_s = a.episode_seconds or a.turns * turn_s + a.execs * exec_s
    in_flight = peak_eps * episode_s
    cfg = SandboxConfig(memory_mb=a.sandbox_memory_mb)
    per_host = reported_capacity({"NCPU": a.host_cores, "MemTotal": a.host_memory_gib * 1024**3}, cfg)
    by_capacity = in_flight / per_host
    basis = [f"in flight = peak {peak_eps:,.1f} episodes/s x {episode_s:.1f} s per episode = {in_flight:,.0f} "
             f"(episode = {a.turns} turns x {turn_s:.1f} s of model time ({a.completion_tokens / a.turns:.0f} tokens at "
             f"{a.sequence_tokens_per_s:g} tokens/s per sequence, an input)"
             + (f" + {a.execs} execs x {warm.source}={exec_s * 1000:.1f} ms)" if warm else ")")]
    rows.append(Row("sandboxes", "sandboxes in use at peak", math.ceil(in_flight), "sandboxes", basis))
    host_basis = [f"capacity {per_host} per {a.host_cores}-core/{a.host_memory_gib} GiB host (pool rule: min(cores x 4, "
                  f"0.8 x memory / {a.sandbox_memory_mb} MiB)) -> {by_capacity:.1f} hosts"]
    hosts = by_capacity
    if per_core is not None:
        by_cpu = peak_eps * a.execs / (per_core.value * a.host_cores) / u
        host_basis.append(f"exec CPU: peak {peak_eps * a.execs:,.0f} execs/s / ({per_core.source}={per_core.value:.1f} "
                          f"exec/s per core x {a.host_cores} cores) / utilization {u:g} = {by_cpu:.2f} hosts")
        hosts = max(hosts, by_cpu)
    rows.append(Row("sandboxes", "hosts (Docker engines)", max(1, math.ceil(hosts)), "hosts", host_basis))
    return rows, load


def _args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes-per-day", type=float, default=1e6)
    ap.add_argument("--peak-factor", type=float, default=3.0, help="peak rate / mean rate (traffic is not flat)")
    ap.add_argument("--utilization", type=float, default=0.6, help="target busy share of every pool at peak")
    ap.add_argument("--turns", type=int, default=4, help="model calls (gateway requests) per episode")
    ap.add_argument("--execs", type=int, default=None, help="sandbox execs per episode (default: --turns)")
    ap.add_argument("--prompt-tokens", type=float, default=8000, help="prompt tokens per episode, all turns")
    ap.add_argument("--prefix-cache-hit", type=float, default=0.5,
                    help="share of prompt tokens vLLM's prefix cache serves (a multi-turn episode resends its "
                         "conversation; session affinity keeps it on one replica)")
    ap.add_argument("--completion-tokens", type=float, default=800, help="generated tokens per episode, all turns")
    ap.add_argument("--sequence-tokens-per-s", type=float, default=40.0,
                    help="decode speed one sequence sees under load (sets how long an episode holds its sandbox)")
    ap.add_argument("--episode-seconds", type=float, default=None, help="measured episode wall time (overrides)")
    ap.add_argument("--model-params-b", type=float, default=8.0)
    ap.add_argument("--dtype-bytes", type=float, default=2.0)
    ap.add_argument("--kv-bytes-per-token", type=float, default=None)
    ap.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    ap.add_argument("--replica-gpus", type=int, default=1, help="GPUs per vLLM replica (tensor parallel)")
    ap.add_argument("--batch", type=int, default=128, help="sequences a replica decodes at once")
    ap.add_argument("--bandwidth-efficiency", type=float, default=0.6, help="share of HBM bandwidth decode reaches")
    ap.add_argument("--mfu", type=float, default=0.4, help="share of peak FLOP/s prefill reaches")
    ap.add_argument("--replica-decode-tokens-per-s", type=float, default=None,
                    help="a measured decode throughput per replica (replaces the estimate)")
    ap.add_argument("--sandbox-memory-mb", type=int, default=256)
    ap.add_argument("--host-cores", type=int, default=16)
    ap.add_argument("--host-memory-gib", type=int, default=64)
    ap.add_argument("--retention-days", type=int, default=30)
    ap.add_argument("--trajectory-bytes", type=float, default=None,
                    help="stored JSON bytes per trajectory (default: the collector bench's size)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="directory of the benchmark results to read")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    a = ap.parse_args(argv)
    if a.execs is None:
        a.execs = a.turns
    return a


def main(argv: Optional[list[str]] = None) -> int:
    global RESULTS
    a = _args(argv)
    RESULTS = a.results
    rows, load = plan(a)
    if a.json:
        print(json.dumps({"load": load, "rows": [r.__dict__ for r in rows]}, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"looplift capacity for {a.episodes_per_day:,.0f} episodes/day (peak {load['peak_episodes_per_s']:,.1f}"
                    f"/s = {a.peak_factor:g} x mean; pools at {a.utilization:.0%} at peak)", show_lines=True)
    for col in ("component", "needs", "number", "how (measured inputs as file:key=value)"):
        t.add_column(col, overflow="fold")
    for r in rows:
        n = "n/a" if r.number is None else (f"{r.number:,.0f}" if r.number >= 10 else f"{r.number:,.2f}".rstrip("0").rstrip("."))
        t.add_row(r.component, r.needs, f"{n} {r.unit}" + ("" if r.measured else " (estimate)"), "\n".join(r.basis))
    Console(width=200).print(t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
