"""Sandbox benchmark: how much a warm `SandboxPool` saves over a fresh `docker run`, and the local backend.

Run: `.venv/bin/python bench/sandboxes.py [--quick] [--json-out bench/results/sandboxes.json]`.

Everything is measured in one run, against a baseline taken in that same run (plain
`docker run --rm --network none <image> python3 -c pass` through docker-py), so the ratios compare
like with like on whatever machine this runs on:

  1. baseline      `containers.run(..., remove=True, network_mode="none")`, p50
  2. cold start    `DockerSandbox(config)` + its first `exec(["python3", "-c", "pass"])`, p50
  3. warm exec     acquire + exec through a Docker `SandboxPool` of size 2, p50 and p99
  4. throughput    8 threads sharing a Docker pool of size 8, exec/s
  5. local exec    `LocalSandbox.exec`, p50, and interleaved with it the bare host command
                   (`subprocess.run(["python3", "-c", "pass"])`, no isolation): the floor it adds to

Targets (from the issue): warm p50 <= 50 ms, throughput >= 20 exec/s on 2 cores, local p50 <= 15 ms.
Without a Docker engine (or without the image) the Docker rows are reported as not measured and the
local row still runs. Every container made here is removed before exit (pools and sandboxes closed,
baseline containers run with `remove=True`).

Not done here: heavier workloads than `python3 -c pass` (the point is sandbox overhead, not Python
speed), memory/CPU accounting, or comparisons across images or runtimes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

# Run as a script from anywhere: the repository root holds the `sandboxes` package.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from sandboxes import (  # noqa: E402
    DockerSandbox,
    EngineUnavailableError,
    ExecResult,
    ImageNotFoundError,
    LocalSandbox,
    SandboxConfig,
    SandboxError,
    SandboxPool,
    choose_backend,
    make_pool,
)

CMD = ["python3", "-c", "pass"]
LABEL = "looplift.sandbox"  # the sandboxes package labels its containers with this
BENCH_LABEL = "looplift.bench"  # and we label the baseline's, so leftovers of either can be found

# Targets from the issue, as (comparison, threshold) in the metric's own unit.
WARM_P50_MAX_S = 0.050
THROUGHPUT_MIN = 20.0  # exec/s, stated for 2 cores
LOCAL_P50_MAX_S = 0.015


@dataclass(frozen=True)
class Sizes:
    """Iteration counts; `--quick` shrinks them to a smoke run of a few seconds."""

    baseline: int
    cold: int
    warm: int
    warmup: int
    throughput: int
    threads: int
    local: int

    @classmethod
    def pick(cls, quick: bool) -> Sizes:
        if quick:
            return cls(baseline=3, cold=3, warm=20, warmup=3, throughput=24, threads=8, local=20)
        return cls(baseline=10, cold=10, warm=100, warmup=10, throughput=80, threads=8, local=100)


@dataclass
class Row:
    """One line of the table and one entry of the JSON `results`."""

    metric: str
    value: float | None  # None: not measured (see `note`)
    unit: str  # "s" or "exec/s"
    ratio_vs_baseline: float | None
    target: str | None  # human-readable, in `unit`
    met: bool | None  # None: no target, or not measured
    samples: int = 0
    failed_execs: int = 0  # execs whose ExecResult was not ok (timeout, non-zero exit, ...)
    note: str = ""


# -- measuring --------------------------------------------------------------------------------------


def p(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); with 20 samples p99 is the maximum, as it should be."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_baseline(client: object, image: str, n: int) -> list[float]:
    """`docker run --rm --network none <image> python3 -c pass`, n times (after one unmeasured run)."""

    def once() -> object:
        return client.containers.run(  # type: ignore[attr-defined]
            image, CMD, remove=True, network_mode="none", labels={BENCH_LABEL: "1"}
        )

    once()  # first run pays one-off costs (image layers into page cache); the sandbox rows get a warm-up too
    return [timed(once)[0] for _ in range(n)]


def bench_cold(config: SandboxConfig, n: int) -> tuple[list[float], int]:
    """Construct a `DockerSandbox` and run its first exec; closing it is not timed."""
    times, failed = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        sb = DockerSandbox(config)
        try:
            res = sb.exec(CMD)
            times.append(time.perf_counter() - t0)
            failed += not res.ok
        finally:
            sb.close()
    return times, failed


def acquire_exec(pool: SandboxPool) -> ExecResult:
    with pool.acquire(timeout=60) as sb:
        return sb.exec(CMD)


def bench_warm(config: SandboxConfig, n: int, warmup: int) -> tuple[list[float], list[float], int]:
    """acquire + exec + release through a pool of 2, sequentially; resets run in the pool's background.

    Also times the exec alone in one held sandbox, which splits the pool's share (liveness check,
    hand-over) from the engine's (exec create/start/inspect).
    """
    with make_pool("docker", config, size=2) as pool:
        pool.wait_ready(60)
        for _ in range(warmup):
            acquire_exec(pool)
        times, failed = [], 0
        for _ in range(n):
            dt_s, res = timed(lambda: acquire_exec(pool))
            times.append(dt_s)
            failed += not res.ok  # type: ignore[attr-defined]
        pool.wait_ready(60)  # let the last reset finish so it does not overlap the held-sandbox loop
        with pool.acquire(timeout=60) as sb:
            held = []
            for _ in range(n):
                dt_s, res = timed(lambda: sb.exec(CMD))
                held.append(dt_s)
                failed += not res.ok  # type: ignore[attr-defined]
        return times, held, failed


def bench_throughput(config: SandboxConfig, count: int, threads: int) -> tuple[float, int]:
    """`count` acquire+exec calls from `threads` threads sharing a pool of `threads`; returns exec/s."""
    with make_pool("docker", config, size=threads) as pool, ThreadPoolExecutor(threads) as ex:
        if not pool.wait_ready(120):
            raise SandboxError(f"the pool did not start {threads} sandboxes within 120 s")
        list(ex.map(lambda _: acquire_exec(pool), range(threads)))  # warm-up: every sandbox used once
        t0 = time.perf_counter()
        results = list(ex.map(lambda _: acquire_exec(pool), range(count)))
        wall = time.perf_counter() - t0
    return count / wall, sum(not r.ok for r in results)


def bench_local(config: SandboxConfig, n: int, warmup: int) -> tuple[list[float], list[float], int, str]:
    """`LocalSandbox.exec` and, interleaved with it (same noise), the bare host command it wraps:
    `subprocess.run` of the same argv with the sandbox's PATH, no isolation. The gap is the backend's cost."""
    import shutil
    import subprocess

    from sandboxes._defaults import PATH

    bare = [shutil.which(CMD[0], path=PATH) or CMD[0], *CMD[1:]]
    with LocalSandbox(config) as sb:
        for _ in range(warmup):
            sb.exec(CMD)
            subprocess.run(bare, check=False)
        times, bare_times, failed = [], [], 0
        for _ in range(n):
            dt_s, res = timed(lambda: sb.exec(CMD))
            times.append(dt_s)
            failed += not res.ok  # type: ignore[attr-defined]
            bare_times.append(timed(lambda: subprocess.run(bare, check=False))[0])
        return times, bare_times, failed, sb.isolation.describe()


# -- reporting --------------------------------------------------------------------------------------


def latency_row(metric: str, value: float, n: int, base: float | None, target_max: float | None,
                failed: int = 0, note: str = "") -> Row:
    return Row(
        metric=metric,
        value=value,
        unit="s",
        ratio_vs_baseline=base / value if base else None,
        target=f"<= {target_max:g} s" if target_max is not None else None,
        met=value <= target_max if target_max is not None else None,
        samples=n,
        failed_execs=failed,
        note=note,
    )


def not_measured(metric: str, unit: str, target: str | None, why: str) -> Row:
    return Row(metric, None, unit, None, target, None, note=f"not measured: {why}")


def render(console: Console, rows: list[Row], base: float | None, cores: int | None) -> None:
    table = Table(title=f"sandbox benchmark ({cores} cores, Python {platform.python_version()})")
    for col, just in (("metric", "left"), ("value", "right"), ("vs baseline", "right"),
                      ("target", "left"), ("met", "center"), ("n", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows:
        if r.value is None:
            value = "—"
        elif r.unit == "s":
            value = f"{r.value * 1000:.1f} ms"
        else:
            value = f"{r.value:.1f} {r.unit}"
        ratio = f"{r.ratio_vs_baseline:.1f}x" if r.ratio_vs_baseline is not None else "—"
        target = r.target or "—"
        if r.target is not None and r.unit == "s":  # thresholds in ms, like the values
            op, num, _ = r.target.split(" ")
            target = f"{op} {float(num) * 1000:g} ms"
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: "—"}[r.met]
        table.add_row(r.metric, value, ratio, target, met, str(r.samples or "—"))
    console.print(table)
    if base is not None:
        console.print(f"baseline: plain `docker run --rm --network none` p50 = {base * 1000:.0f} ms "
                      f"(= {1 / base:.2f} exec/s); ratio = baseline p50 / value, throughput: value / (1 / baseline p50)")
    for r in rows:
        if r.note:
            console.print(f"[dim]{r.metric}: {r.note}[/]")
    if base is not None:
        console.print("[dim]the baseline includes removing its container (--rm); cold start does not time close()[/]")
        if r.failed_execs:
            console.print(f"[yellow]{r.metric}: {r.failed_execs} exec(s) did not return ok[/]")


def labelled_containers(client: object) -> set[str]:
    ids: set[str] = set()
    for label in (LABEL, BENCH_LABEL):
        ids |= {c.id for c in client.containers.list(all=True, filters={"label": label})}  # type: ignore[attr-defined]
    return ids


# -- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few iterations: a smoke run of the benchmark")
    ap.add_argument("--json-out", type=Path, default=None, help="write the results as JSON to this file")
    ap.add_argument("--image", default=SandboxConfig().image, help="sandbox image (default: %(default)s)")
    args = ap.parse_args(argv)

    console = Console()
    if not console.is_terminal:
        console.width = 120  # logs and pipes: keep each table row on one line
    sizes = Sizes.pick(args.quick)
    config = SandboxConfig(image=args.image)
    cores = os.cpu_count()
    rows: list[Row] = []
    base: float | None = None
    engine = None

    # Explicitly asking for docker raises the error that says what is missing (engine or image).
    client = None
    try:
        choose_backend("docker", config.image)
        import docker

        client = docker.from_env()
        engine = client.version().get("Version")
    except (EngineUnavailableError, ImageNotFoundError) as e:
        console.print(f"[yellow]Docker rows not measured:[/] {e}")
        docker_why = "no Docker engine" if isinstance(e, EngineUnavailableError) else "sandbox image missing"

    docker_metrics = [
        ("cold start (DockerSandbox + first exec) p50", "s", None),
        ("warm acquire+exec p50 (pool of 2)", "s", f"<= {WARM_P50_MAX_S:g} s"),
        ("warm acquire+exec p99 (pool of 2)", "s", None),
        ("exec only in a held sandbox p50", "s", None),
        (f"throughput, {sizes.threads} threads (pool of {sizes.threads})", "exec/s", f">= {THROUGHPUT_MIN:g} exec/s"),
    ]
    before: set[str] = set()
    t_start = time.perf_counter()
    try:
        if client is None:
            rows.append(not_measured("baseline: docker run --rm --network none, p50", "s", None, docker_why))
            rows += [not_measured(m, u, t, docker_why) for m, u, t in docker_metrics]
        else:
            before = labelled_containers(client)
            with console.status(f"baseline: docker run x{sizes.baseline}"):
                b = bench_baseline(client, config.image, sizes.baseline)
            base = statistics.median(b)
            rows.append(latency_row("baseline: docker run --rm --network none, p50", base, len(b), base, None))
            with console.status(f"cold start x{sizes.cold}"):
                c, cf = bench_cold(config, sizes.cold)
            rows.append(latency_row(docker_metrics[0][0], statistics.median(c), len(c), base, None, cf))
            with console.status(f"warm acquire+exec x{sizes.warm}"):
                w, held, wf = bench_warm(config, sizes.warm, sizes.warmup)
            rows.append(latency_row(docker_metrics[1][0], statistics.median(w), len(w), base, WARM_P50_MAX_S, wf))
            rows.append(latency_row(docker_metrics[2][0], p(w, 99), len(w), base, None))
            rows.append(latency_row(docker_metrics[3][0], statistics.median(held), len(held), base, None,
                                    note="no acquire/release: the exec round trips alone, for diagnosis"))
            with console.status(f"throughput: {sizes.throughput} execs on {sizes.threads} threads"):
                tput, tf = bench_throughput(config, sizes.throughput, sizes.threads)
            rows.append(Row(docker_metrics[4][0], tput, "exec/s", tput * base, docker_metrics[4][2],
                            tput >= THROUGHPUT_MIN, sizes.throughput, tf,
                            note=f"target is stated for 2 cores; this machine has {cores}" if cores != 2 else ""))
    except SandboxError as e:
        # A sandbox that could not start is a failure of the machinery, not a result: say so and stop.
        console.print(f"[red]error:[/] {e}")
        return 1
    finally:
        if client is not None:
            leaked = labelled_containers(client) - before
            if leaked:
                console.print(f"[red]warning:[/] {len(leaked)} container(s) created during this run are still "
                              f"there: {', '.join(i[:12] for i in sorted(leaked))}")
            client.close()

    with console.status(f"local exec x{sizes.local}"):
        lt, bt, lf, iso = bench_local(config, sizes.local, sizes.warmup)
    bare_p50 = statistics.median(bt)
    rows.append(latency_row("local exec p50 (LocalSandbox)", statistics.median(lt), len(lt), base,
                            LOCAL_P50_MAX_S, lf, note=f"isolation: {iso}; {statistics.median(lt) / bare_p50:.2f}x "
                            "the bare host command"))
    rows.append(latency_row("bare host subprocess, same argv, p50", bare_p50, len(bt), base, None,
                            note="no sandbox at all: the floor the local backend adds its isolation to"))
    elapsed = time.perf_counter() - t_start

    render(console, rows, base, cores)
    console.print(f"[dim]took {elapsed:.1f} s{' (--quick)' if args.quick else ''}[/]")

    if args.json_out is not None:
        out = {
            "machine": {"cores": cores, "python": platform.python_version(), "platform": platform.platform(),
                        "docker_engine": engine},
            "quick": args.quick,
            "config": config.to_dict(),
            "baseline_docker_run_p50_s": base,
            "results": [asdict(r) for r in rows],
            "seconds": round(elapsed, 1),
            "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
        console.print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
