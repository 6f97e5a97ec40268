"""The soak's invariant checker: what must hold after a soak (bench/soak.py), read back from what the product
left behind, each answered as pass/fail with its evidence.

It reads only the soak's own record (the client's ledger, the fault log, the operator's notes) and the product's
durable state through its public surfaces: the collector database (`collector.open_store`, the response-id
links, the feedback rows), `collector export` run twice, the gateway's `registry.json` (versions, serving stack,
history), the trainer's runs dir (`trainer.list_runs`) and lock (`trainer.JobLock`), and /proc, docker and the
socket table for what outlived the stack. It is written to be run after the stack has stopped, and decides
nothing about how the soak drives the product.

| invariant | holds when |
|---|---|
| captured_exactly_once | every chat request the client saw a 2xx for resolves to one trajectory whose `response_ids` lists it once |
| no_unexpected_capture | every response id the store holds is one the client got a 2xx for |
| feedback_joined | every feedback the gateway accepted (2xx) is a row on the trajectory its response id resolves to |
| no_half_written_trajectory | every stored trajectory reads back whole: messages, an assistant reply last, links that resolve |
| export_deterministic | `collector export` run twice over the same data writes the same bytes |
| killed_export_left_nothing | a `collector export` SIGKILLed mid-way left no partial output or temp file |
| served_version_gated | the alias only ever served the base or a version a gate run promoted (or canaried and the watch promoted) |
| history_has_figures | every automatic promote/rollback of a canary in the gateway's history carries its figures |
| canary_resumed_or_ended | a canary running when the gateway was killed was, after the restart, running again or ended with a reason |
| lock_never_shared | no two retrain jobs that got past the lock ran at overlapping times; the lock is free at the end |
| no_run_left_running | no run is left "running" (every process that started one is gone and recorded or seen as interrupted) |
| nothing_left_behind | no process, container, listening port, mount or temp file of the soak is left after shutdown |
| home_disk_bounded | LOOPLIFT_HOME's size at the end is under the bound |

Deliberately not here: starting, driving or killing anything (bench/soak.py), and any judgement of the model's
quality (the gate's business).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

#: Evidence lists are cut to this many items (the count is always given in full).
SHOW = 8


@dataclass
class Result:
    """One invariant's verdict."""

    name: str
    passed: bool
    evidence: str
    details: list[str] = field(default_factory=list)


@dataclass
class SoakFacts:
    """What the soak hands the checker (all JSON-ready; bench/soak.py fills it as it goes)."""

    home: str
    db_url: str
    ledger: list[dict[str, Any]]
    """One row per attempt: kind (chat|feedback), rid (the logical request), attempt, t, status (HTTP status or
    None), error, response_id, version, session, final (the last attempt of its logical request)."""
    faults: list[dict[str, Any]]
    """One row per planned fault: kind, t, injected (bool), note, restart (how the killed part came back)."""
    canary_kills: list[dict[str, Any]]
    """Per gateway kill during a canary: version, before, after (the canary view after the restart), history."""
    ports: list[int]
    owned_pids: list[int]
    """Every pid the soak started or saw among its own (sessions included)."""
    sessions: list[int]
    marker: str
    """The `LOOPLIFT_HOME=...` environment entry every process of ours carries."""
    mounts: list[str]
    temp_paths: list[str]
    """Temporary files/dirs the soak made outside LOOPLIFT_HOME; none may remain."""
    up_starts: list[tuple[float, float]] = field(default_factory=list)
    """Ledger times (started, healthy) of every start of `looplift up`."""
    up_kills: list[float] = field(default_factory=list)
    """Ledger times (seconds) at which `looplift up`, the gateway's and the collector's process, was SIGKILLed."""
    kill_times: dict[str, float] = field(default_factory=dict)
    clock_steps: list[tuple[float, float]] = field(default_factory=list)
    """(true time, offset of the wall clock from then on): the soak's start (offset 0), then every clock step it made;
    the soak's own times (ledger, kills) are true times, the product's stamps are wall-clock times (`true_time`)."""
    """Trainer pid (as a string) -> epoch time the soak SIGKILLed it or saw it exit: when its lock was released at
    the latest (the end of a run it never recorded)."""
    disk_bound_bytes: int = 512 << 20


def _cut(items: list[str]) -> list[str]:
    return items[:SHOW] + ([f"... and {len(items) - SHOW} more"] if len(items) > SHOW else [])


def _ok_2xx(row: dict[str, Any]) -> bool:
    return isinstance(row.get("status"), int) and 200 <= row["status"] < 300


# ---- the collector's side ---------------------------------------------------------------------------------
def _store_view(db_url: str) -> dict[str, Any]:
    """Trajectories (id -> metadata response ids, messages), response links and feedback, read once."""
    import sqlalchemy as sa

    from collector import open_store

    store = open_store(db_url, migrate_schema=False)
    try:
        with store.engine.connect() as conn:  # the listing the Store has no call for; rows read through it below
            ids = [r[0] for r in conn.execute(sa.text("select id from trajectories"))]
            links = {r[0]: r[1] for r in conn.execute(sa.text("select response_id, trajectory_id from response_ids"))}
            fb = [(r[0], r[1]) for r in conn.execute(sa.text("select trajectory_id, rating from feedback"))]
        trajs: dict[str, Any] = {}
        unreadable: list[str] = []
        for tid in ids:
            try:
                t = store.get(tid)
            except Exception as e:  # noqa: BLE001 - a row that does not parse is exactly what we look for
                unreadable.append(f"{tid}: {type(e).__name__}: {e}")
                continue
            if t is None:
                unreadable.append(f"{tid}: listed but get() found nothing")
                continue
            trajs[tid] = t
        resolved = {rid: store.resolve_response(rid) for rid in links}
    finally:
        store.close()
    return {"trajs": trajs, "links": links, "resolved": resolved, "feedback": fb, "unreadable": unreadable}


def check_captured_exactly_once(facts: SoakFacts, view: dict[str, Any]) -> Result:
    from sdk import wire

    ok = [r for r in facts.ledger if r["kind"] == "chat" and _ok_2xx(r)]
    bad: list[str] = []
    for r in ok:
        rid = r["response_id"]
        tid = view["resolved"].get(rid)
        if tid is None:
            after = [k - r["t"] for k in facts.up_kills if k >= r["t"]]
            near = f"; `looplift up` SIGKILLed {min(after):.1f} s after the client got it" if after else ""
            starting = [(a, b) for a, b in facts.up_starts if a <= r["t"] <= b + 2.0]
            if starting:
                near += (f"; served while `looplift up` (started t={starting[0][0]:.1f}, healthy t={starting[0][1]:.1f})"
                         " was still starting")
            bad.append(f"{rid} (session {r['session']}, t={r['t']:.1f}, version {r.get('version')}): not captured{near}")
            continue
        t = view["trajs"].get(tid)
        listed = t.metadata.get(wire.RESPONSE_IDS_KEY, []) if t is not None else []
        if Counter(listed)[rid] != 1:
            bad.append(f"{rid}: trajectory {tid} lists it {Counter(listed)[rid]} times")
        r["captured_id"] = tid
    return Result("captured_exactly_once", not bad and bool(ok),
                  f"{len(ok) - len(bad)} of {len(ok)} 2xx chat responses resolve to exactly one trajectory",
                  _cut(bad))


def check_no_unexpected_capture(facts: SoakFacts, view: dict[str, Any]) -> Result:
    from sdk import wire

    got = {r["response_id"] for r in facts.ledger if r["kind"] == "chat" and _ok_2xx(r)}
    held: list[tuple[str, str]] = [(rid, tid) for tid, t in view["trajs"].items()
                                   for rid in t.metadata.get(wire.RESPONSE_IDS_KEY, [])]
    extra = [f"{rid} in {tid}" for rid, tid in held if rid not in got]
    dup = [f"{rid}: in {n} trajectories" for rid, n in Counter(rid for rid, _ in held).items() if n > 1]
    return Result("no_unexpected_capture", not extra and not dup,
                  f"{len(held)} response ids held by {len(view['trajs'])} trajectories; {len(extra)} the client never "
                  f"got a 2xx for, {len(dup)} held twice", _cut(extra + dup))


def check_feedback_joined(facts: SoakFacts, view: dict[str, Any]) -> Result:
    accepted = [r for r in facts.ledger if r["kind"] == "feedback" and _ok_2xx(r)]
    rows = Counter(tid for tid, _ in view["feedback"])
    want: Counter[str] = Counter()
    bad: list[str] = []
    for r in accepted:
        tid = view["resolved"].get(r["response_id"])
        if tid is None:
            bad.append(f"feedback on {r['response_id']} accepted but the response resolves to no trajectory")
        else:
            want[tid] += 1
    for tid, n in want.items():
        if rows[tid] < n:
            bad.append(f"trajectory {tid}: {n} feedback accepted, {rows[tid]} stored")
    return Result("feedback_joined", not bad, f"{len(accepted)} accepted feedback, {sum(rows.values())} feedback rows "
                                               f"on {len(rows)} trajectories", _cut(bad))


def check_no_half_written(facts: SoakFacts, view: dict[str, Any]) -> Result:
    bad = list(view["unreadable"])
    for tid, t in view["trajs"].items():
        if not t.messages:
            bad.append(f"{tid}: no messages")
        elif t.messages[-1].role != "assistant":
            bad.append(f"{tid}: last message is {t.messages[-1].role!r}, not the reply")
    dangling = [f"response {rid} -> {tid}: no such trajectory" for rid, tid in view["links"].items()
                if tid not in view["trajs"]]
    bad += dangling
    return Result("no_half_written_trajectory", not bad, f"{len(view['trajs'])} trajectories read back; "
                                                         f"{len(bad)} broken", _cut(bad))


def check_export_deterministic(facts: SoakFacts, tmp: Path) -> Result:
    """`collector export` (the CLI, as an operator runs it) twice, each format; the JSONL bytes must match."""
    exe = Path(sys.executable).parent / "collector"
    env = {**os.environ, "LOOPLIFT_HOME": facts.home}
    diffs: list[str] = []
    sizes: list[str] = []
    for fmt in ("sft", "dpo", "grpo"):
        outs = []
        for i in (1, 2):
            out = tmp / f"export-{fmt}-{i}.jsonl"
            p = subprocess.run([str(exe), "export", "--format", fmt, "--db", facts.db_url, "--out", str(out)],
                               env=env, capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                diffs.append(f"{fmt} export #{i} exited {p.returncode}: {p.stderr.strip()[-300:]}")
                break
            outs.append(out.read_bytes() if out.exists() else b"")
        if len(outs) == 2:
            sizes.append(f"{fmt}: {len(outs[0].splitlines())} lines")
            if outs[0] != outs[1]:
                diffs.append(f"{fmt}: the two exports differ ({len(outs[0])} vs {len(outs[1])} bytes)")
    return Result("export_deterministic", not diffs, "; ".join(sizes) or "no export ran", _cut(diffs))


def check_killed_export_left_nothing(facts: SoakFacts) -> Result:
    """A `collector export` SIGKILLed mid-way leaves no partial output (the file is written whole or not at all)."""
    kills = [f for f in facts.faults if f["kind"] == "collector_kill_export" and f["injected"]]
    bad = [f"killed at t={f['t']}: left {f['left_files']}" for f in kills if f.get("left_files")]
    return Result("killed_export_left_nothing", not bad,
                  f"{len(kills)} exports killed mid-way" if kills else "no export was killed mid-way (nothing to check)",
                  _cut(bad))


# ---- the gateway's side -----------------------------------------------------------------------------------
def _registry(home: Path) -> Optional[dict[str, Any]]:
    path = home / "server" / "registry.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _runs(home: Path) -> list[dict[str, Any]]:
    from trainer import list_runs

    return list_runs(home / "trainer" / "runs")


def check_served_version_gated(facts: SoakFacts, home: Path) -> Result:
    reg = _registry(home)
    if reg is None:
        return Result("served_version_gated", False, f"no readable registry.json under {home / 'server'}")
    runs = _runs(home)
    gated = {r["candidate"] for r in runs if r.get("status") in ("promoted", "canary") and r.get("candidate")}
    base = reg["versions"][0]["name"] if reg.get("versions") else "policy-v0"
    served: list[tuple[str, str]] = [("start", base)]
    bad: list[str] = []
    for h in reg.get("history", []):
        if h["action"] in ("promote", "rollback", "restore"):
            served.append((f"{h['action']} at {h['at']}", h["version"]))
        if h["action"] == "canary" and h.get("canary") == "promote":
            served.append((f"canary promote at {h['at']}", h["version"]))
    for how, v in served:
        if v != base and v not in gated:
            bad.append(f"{v} served after {how}, but no trainer run promoted or canaried it (gated: {sorted(gated)})")
    if reg.get("serving") not in {base, *gated}:
        bad.append(f"serving {reg.get('serving')} at the end: neither the base nor gated")
    return Result("served_version_gated", not bad,
                  f"served over time: {' -> '.join(v for _, v in served)}; serving {reg.get('serving')} at the end; "
                  f"gate-approved: {sorted(gated) or 'none'}", _cut(bad))


def check_history_has_figures(facts: SoakFacts, home: Path) -> Result:
    reg = _registry(home) or {}
    hist = reg.get("history", [])
    decisions = [h for h in hist if h["action"] == "canary" and h.get("canary") in ("promote", "drop", "rollback")]
    missing = [f"{h['at']} {h['canary']} {h['version']}: no figures" for h in decisions if not h.get("figures")]
    # A plain promote is the trainer's (figures in its run record): every promoted run names its gate figures.
    runs = [r for r in _runs(home) if r.get("status") in ("promoted", "canary")]
    for r in runs:
        if r.get("candidate_success") is None or r.get("serving_success") is None:
            missing.append(f"run {r['run_id']} {r['status']} {r.get('candidate')}: no gate figures in its record")
        promoted_in_history = any(h["action"] == "promote" and h["version"] == r.get("candidate") for h in hist)
        canaried = any(h["action"] == "canary" and h["version"] == r.get("candidate") for h in hist)
        if r.get("status") == "promoted" and not promoted_in_history:
            missing.append(f"run {r['run_id']} promoted {r.get('candidate')} but the gateway's history has no promote")
        if r.get("status") == "canary" and not canaried:
            missing.append(f"run {r['run_id']} started a canary of {r.get('candidate')}; no canary event in history")
    counts = Counter(h["action"] + (f":{h['canary']}" if h.get("canary") else "") for h in hist)
    return Result("history_has_figures", not missing, f"history: {dict(counts)}; {len(runs)} promoting runs",
                  _cut(missing))


def check_canary_resumed_or_ended(facts: SoakFacts) -> Result:
    bad: list[str] = []
    for k in facts.canary_kills:
        after = k.get("after") or {}
        if after.get("canary") and after["canary"].get("version") == k["version"]:
            continue  # resumed
        ends = [h for h in k.get("history_after", []) if h.get("action") == "canary" and h.get("version") == k["version"]
                and h.get("canary") in ("promote", "drop", "rollback", "end")]
        if ends and all(h.get("detail") or h.get("figures") for h in ends):
            continue
        bad.append(f"canary of {k['version']} killed at t={k['t']:.1f}: after the restart neither running nor ended "
                   f"with a reason (after={after}, events={ends})")
    return Result("canary_resumed_or_ended", not bad,
                  f"{len(facts.canary_kills)} gateway kills during a canary" if facts.canary_kills
                  else "no gateway kill landed during a canary (nothing to check)", _cut(bad))


# ---- the trainer's side -----------------------------------------------------------------------------------
#: A stamp taken just before a step may be written with the old offset (and the other way round).
_STEP_SLACK_S = 5.0


def true_time(stamp: Optional[str], steps: list[tuple[float, float]]) -> Optional[float]:
    """The true epoch time of a wall-clock ISO `stamp` the product wrote during the soak, `steps` being
    `SoakFacts.clock_steps`: the one period whose offset puts the stamp inside it. The steps are whole days,
    longer than any soak, so at most one period fits; None for no stamp."""
    if not stamp:
        return None
    wall = datetime.fromisoformat(stamp).timestamp()
    periods = steps or [(float("-inf"), 0.0)]
    for i, (start, offset) in enumerate(periods):
        end = periods[i + 1][0] if i + 1 < len(periods) else float("inf")
        if start - _STEP_SLACK_S <= wall - offset < end + _STEP_SLACK_S:
            return wall - offset
    return wall


def check_lock_never_shared(facts: SoakFacts, home: Path) -> Result:
    from trainer import JobLock

    spans: list[tuple[float, float, str]] = []
    open_ended: list[str] = []
    for r in _runs(home):
        if r.get("status") == "skipped" and "another" in str(r.get("reason", "")):
            continue  # turned away by the lock: never held it
        start = true_time(r.get("started_at"), facts.clock_steps)
        end = true_time(r.get("finished_at"), facts.clock_steps) or facts.kill_times.get(str(r.get("pid")))
        if start is None:
            continue
        if end is None:
            open_ended.append(f"{r['run_id']} ({r.get('status')}): no end time known")
            continue
        spans.append((start, end, f"{r['run_id']} {r.get('status')}"))
    spans.sort()
    overlaps = [f"{a[2]} [{a[0]:.1f}, {a[1]:.1f}] overlaps {b[2]} [{b[0]:.1f}, {b[1]:.1f}]"
                for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    lock = JobLock(facts.db_url, home / "trainer" / "runs")
    free = lock.try_acquire()
    lock.release()
    bad = overlaps + open_ended + ([] if free else [f"{lock.description} still held at the end: {lock.holder()}"])
    return Result("lock_never_shared", not bad, f"{len(spans)} runs that held the lock, {len(overlaps)} overlapping; "
                                                f"lock free at the end: {free}", _cut(bad))


def check_no_run_left_running(facts: SoakFacts, home: Path) -> Result:
    runs = _runs(home)
    running = [f"{r['run_id']} (pid {r.get('pid')})" for r in runs if r.get("status") == "running"]
    statuses = Counter(str(r.get("status")) for r in runs)
    return Result("no_run_left_running", not running, f"{len(runs)} runs: {dict(statuses)}", _cut(running))


# ---- the machine's side -----------------------------------------------------------------------------------
def _stat(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _environ_has(pid: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def ours(marker: str, sessions: set[int]) -> list[str]:
    """`pid cmdline` of every live process that carries `marker` in its environment or sits in one of
    `sessions` (vLLM's engine core overwrites its environment with its title; its session still shows it)."""
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        st = _stat(p)
        if not st or st[0] == "Z" or int(p) == os.getpid():
            continue
        if int(st[3]) in sessions or _environ_has(p, marker.encode()):
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
            except OSError:
                cmd = "?"
            out.append(f"{p} {cmd}")
    return out


def listening(port: int) -> bool:
    """Whether anything listens on 127.0.0.1:`port` (the kernel's table, not a connect)."""
    hexport = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        if any(line.split()[1].endswith(hexport) and line.split()[3] == "0A" for line in lines):
            return True
    return False


def _containers(marker: str) -> Optional[list[str]]:
    """Sandbox containers whose labels name our home; None when no Docker engine answers."""
    try:
        import docker
    except ImportError:
        return None
    try:
        client = docker.from_env(timeout=5)
        found = [c.name for c in client.containers.list(all=True)
                 if marker.split("=", 1)[1] in json.dumps(c.labels) or marker in json.dumps(c.attrs.get("Config", {}))]
        client.close()
        return found
    except Exception:  # noqa: BLE001 - no engine: nothing of ours can be there
        return None


def check_nothing_left(facts: SoakFacts) -> Result:
    procs = ours(facts.marker, set(facts.sessions))
    ports = [p for p in facts.ports if listening(p)]
    containers = _containers(facts.marker)
    mounts = Path("/proc/mounts").read_text().split("\n")
    left_mounts = [m for m in facts.mounts if any(line.split(" ")[1:2] == [m] for line in mounts if line)]
    temps = [t for t in facts.temp_paths if Path(t).exists()]
    bad = ([f"process {p}" for p in procs] + [f"port {p} listening" for p in ports] +
           [f"container {c}" for c in containers or []] + [f"mount {m}" for m in left_mounts] +
           [f"temp {t}" for t in temps])
    return Result("nothing_left_behind", not bad,
                  f"{len(procs)} processes, {len(ports)} of {len(facts.ports)} ports, "
                  f"{'no engine' if containers is None else len(containers)} containers, {len(left_mounts)} mounts, "
                  f"{len(temps)} temp paths left", _cut(bad))


def home_size(home: Path) -> int:
    """Bytes under `home` (files only, links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(home):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def check_home_bounded(facts: SoakFacts, home: Path) -> Result:
    size = home_size(home)
    top = sorted(((home_size(p) if p.is_dir() else p.stat().st_size, p.name) for p in home.iterdir()), reverse=True)
    return Result("home_disk_bounded", size <= facts.disk_bound_bytes,
                  f"{size / 2**20:.1f} MiB (bound {facts.disk_bound_bytes / 2**20:.0f} MiB); largest: " +
                  ", ".join(f"{n} {s / 2**20:.1f} MiB" for s, n in top[:4]))


# ---- all of them ------------------------------------------------------------------------------------------
def check_stopped_state(facts: SoakFacts, scratch: Path) -> list[Result]:
    """Every invariant over the durable state; run after the stack stopped (the collector database is read
    directly). `nothing_left_behind` is checked separately (`check_nothing_left`) once the soak's own
    mounts and temp files are gone."""
    home = Path(facts.home)
    checks: list[tuple[str, Callable[[], Result]]] = []
    store_names = ("captured_exactly_once", "no_unexpected_capture", "feedback_joined", "no_half_written_trajectory")
    try:
        view = _store_view(facts.db_url)
        checks += list(zip(store_names, (lambda: check_captured_exactly_once(facts, view),
                                         lambda: check_no_unexpected_capture(facts, view),
                                         lambda: check_feedback_joined(facts, view),
                                         lambda: check_no_half_written(facts, view))))
    except Exception as e:  # noqa: BLE001 - an unreadable store fails every store invariant, with the reason
        reason = f"the collector store could not be read: {type(e).__name__}: {e}"
        checks += [(n, lambda n=n: Result(n, False, reason)) for n in store_names]  # type: ignore[misc]
    checks += [("export_deterministic", lambda: check_export_deterministic(facts, scratch)),
               ("killed_export_left_nothing", lambda: check_killed_export_left_nothing(facts)),
               ("served_version_gated", lambda: check_served_version_gated(facts, home)),
               ("history_has_figures", lambda: check_history_has_figures(facts, home)),
               ("canary_resumed_or_ended", lambda: check_canary_resumed_or_ended(facts)),
               ("lock_never_shared", lambda: check_lock_never_shared(facts, home)),
               ("no_run_left_running", lambda: check_no_run_left_running(facts, home)),
               ("home_disk_bounded", lambda: check_home_bounded(facts, home))]
    results = []
    for name, check in checks:
        try:
            results.append(check())
        except Exception as e:  # noqa: BLE001 - a checker bug is a failed invariant with its reason, not a crash
            results.append(Result(name, False, f"checker raised {type(e).__name__}: {e}"))
    return results


def as_json(results: list[Result]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


def by_key(rows: list[dict[str, Any]], key: str) -> dict[Any, list[dict[str, Any]]]:
    """Rows grouped by `key` (a small helper the report shares)."""
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[r.get(key)].append(r)
    return out
