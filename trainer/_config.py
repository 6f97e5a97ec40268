"""`looplift.toml`: the retrain settings `trainer run`, `trainer schedule` and `looplift up` share.

Found at `--config PATH`, else `$LOOPLIFT_CONFIG`, else `./looplift.toml`, else
`$LOOPLIFT_HOME/looplift.toml`; none at all is fine (everything has a default or a flag). A flag given on
the command line wins over the file. Unknown sections or keys are an error that names them (a typo must
not silently fall back to a default), and so is a value of the wrong type. Relative paths in the file
are relative to the file's directory.

    [trainer]                        # the retrain job
    eval = "myapp.evals:suite"       # PKG.MODULE:ATTR or a prompt-suite .jsonl (required to run a job)
    app = "myapp"                    # train on this app's trajectories only
    algo = "sft"                     # the train step
    base_model = "/models/base"      # HF dir the server serves (default: the cached tiny model)
    db = "sqlite:///..."             # collector DB URL (default: $LOOPLIFT_HOME/collector.db)
    gateway = "http://127.0.0.1:8000"
    alias = "policy"
    min_reward = 1.0                 # train on trajectories with at least this reward
    min_score = 0.75                 # or: with at least this final score (feedback-judged apps; replaces min_reward)
    min_examples = 8                 # skip a run with fewer examples
    holdout = 0.1                    # export with this holdout fraction (tasks of a from-holdout suite)
    runs_dir = "runs"                # default $LOOPLIFT_HOME/trainer/runs
    eval_seed = 0                    # default: the suite's sampling seed, else 0
    eval_concurrency = 16
    canary = 0.1                     # gate passed: canary at this share of traffic instead of promoting
    nproc = 1                        # train on N processes (devices) under torchrun
    strategy = "ddp"                 # with nproc > 1: ddp | fsdp

    [gate]
    alpha = 0.05                     # per-app family-wise level: the k-th gate tests at alpha * 6/(pi^2 k^2)
    slice_tolerance = 0.05           # largest allowed drop of a slice's success rate
    report_fraction = 0.3            # share of tasks (by id hash) that never decide; the held-out figure
    retries = 2                      # re-runs of an eval episode that errored before the gate refuses

    [schedule]                       # `trainer schedule`, `looplift up --retrain`
    cron = "0 3 * * *"               # croniter syntax, local time
    new_data = 500                   # N new scored trajectories of the app since the last run
    drift = 0.10                     # live success this far below what the gate measured
    drift_window = "24h"             # over this window (s, m, h, d)
    drift_min_episodes = 30          # fewer live episodes: no drift decision
    poll = "30s"                     # how often triggers are checked

    [canary]                         # `trainer canary watch`, `looplift up`: live canary decisions + rollback watch
    alpha = 0.05                     # error level of the always-valid tests (decide at e-value 1/alpha)
    min_samples = 30                 # live episodes per side before any decision
    max_samples = 400                # per side; still undecided: drop
    watch = "1h"                     # after a promotion, roll back within this window when live success fell
    watch_min_samples = 30           # ... over at least this many episodes
    watch_tolerance = 0.10           # ... shown more than this below the replaced version's (the hour before)
    poll = "15s"

    [sft]                            # trainer.SFTConfig fields: rank, alpha, dropout, lr, steps, batch_size, seed, max_len
    [dpo]                            # trainer.DPOConfig fields (`--algo dpo`): rank, alpha, lr, steps, beta, nll_weight,
                                     # max_len, reference = "serving" | "base", ...
    [grpo]                           # trainer.GRPOConfig's numeric fields (`--algo grpo`): lr, epochs, clip_low, clip_high,
                                     # dual_clip, max_staleness, kl_beta, ...
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sdk import looplift_home

from . import _defaults as D
from .errors import ConfigError

if TYPE_CHECKING:
    from ._canary import CanaryConfig
    from ._job import JobConfig
    from ._schedule import ScheduleConfig

_NUM = (int, float)
#: An algorithm config's field type (as annotated) -> the TOML types its key accepts; other fields are not keys.
_FIELD_TYPES: dict[Any, tuple[type, ...]] = {"float": _NUM, float: _NUM, "int": (int,), int: (int,), "str": (str,), str: (str,)}
#: section -> key -> accepted Python types of the TOML value.
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "trainer": {"eval": (str,), "app": (str,), "algo": (str,), "base_model": (str,), "db": (str,),
                "gateway": (str,), "gateway_wait": (str, *_NUM), "alias": (str,), "min_reward": _NUM,
                "min_score": _NUM, "min_examples": (int,), "holdout": _NUM, "runs_dir": (str,), "eval_seed": (int,),
                "eval_concurrency": (int,), "canary": _NUM, "nproc": (int,), "strategy": (str,)},
    "gate": {"alpha": _NUM, "slice_tolerance": _NUM, "report_fraction": _NUM, "retries": (int,)},
    "schedule": {"cron": (str,), "new_data": (int,), "drift": _NUM, "drift_window": (str, *_NUM),
                 "drift_min_episodes": (int,), "poll": (str, *_NUM)},
    "canary": {"alpha": _NUM, "min_samples": (int,), "max_samples": (int,), "watch": (str, *_NUM),
               "watch_min_samples": (int,), "watch_tolerance": _NUM, "poll": (str, *_NUM)},
    # Filled from the config class's numeric and string fields when a file has the section (importing them imports torch).
    "sft": {},
    "dpo": {},
    "grpo": {},
}
#: section -> (module, class) of the algorithm config it sets.
_ALGO_CONFIGS = {"sft": (".sft", "SFTConfig"), "dpo": (".dpo", "DPOConfig"), "grpo": (".grpo", "GRPOConfig")}
_PATH_KEYS = {("trainer", "base_model"), ("trainer", "runs_dir")}


@dataclass(frozen=True)
class LoopliftConfig:
    """The parsed file: one dict per section (only the keys it sets), and where it came from."""

    path: Optional[Path] = None
    trainer: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    canary: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    dpo: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)


def find_config(explicit: Optional[Path] = None) -> Optional[Path]:
    """The config file to read (see the module docstring), or None."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"--config {explicit}: no such file")
        return explicit
    env = os.environ.get(D.CONFIG_ENV)
    if env:
        if not Path(env).is_file():
            raise ConfigError(f"${D.CONFIG_ENV}={env}: no such file")
        return Path(env)
    for candidate in (Path.cwd() / D.CONFIG_FILENAME, looplift_home() / D.CONFIG_FILENAME):
        if candidate.is_file():
            return candidate
    return None


def _resolve(path: Path, section: str, key: str, value: Any) -> Any:
    rel = (section, key) in _PATH_KEYS or (section, key) == ("trainer", "eval") and value.endswith((".jsonl", ".json"))
    if rel and not Path(value).is_absolute():
        return str((path.parent / value).resolve())
    return value


def load_config(explicit: Optional[Path] = None) -> LoopliftConfig:
    """Read and check the config file (an empty config when there is none)."""
    path = find_config(explicit)
    if path is None:
        return LoopliftConfig()
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    for section in (s for s in _ALGO_CONFIGS if s in raw and not SCHEMA[s]):
        config_class = _algo_config(section)
        SCHEMA[section] = {f.name: _FIELD_TYPES[f.type] for f in dataclasses.fields(config_class) if f.type in _FIELD_TYPES}
    unknown = [f"[{s}]" for s in raw if s not in SCHEMA]
    unknown += [f"[{s}].{k}" for s, keys in raw.items() if s in SCHEMA and isinstance(keys, dict)
                for k in keys if k not in SCHEMA[s]]
    if unknown:
        known = "; ".join(f"[{s}] {', '.join(sorted(keys))}" for s, keys in SCHEMA.items())
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {known})")
    sections: dict[str, dict[str, Any]] = {}
    for section, keys in raw.items():
        if not isinstance(keys, dict):
            raise ConfigError(f"{path}: `{section}` must be a table ([{section}]), not a value")
        for key, value in keys.items():
            types = SCHEMA[section][key]
            if isinstance(value, bool) or not isinstance(value, types):
                want = " or ".join(t.__name__ for t in types)
                raise ConfigError(f"{path}: [{section}].{key} must be {want}, not {type(value).__name__} ({value!r})")
            sections.setdefault(section, {})[key] = _resolve(path, section, key, value)
    return LoopliftConfig(path=path, **sections)


def _algo_config(section: str) -> Any:
    import importlib

    module, name = _ALGO_CONFIGS[section]
    return getattr(importlib.import_module(module, __package__), name)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any, what: str) -> float:
    """Seconds from `30`, `"45s"`, `"30m"`, `"24h"` or `"2d"`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if m is None:
            raise ConfigError(f"{what} {value!r} is not a duration; write it like 45s, 30m, 24h or 2d")
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds <= 0:
        raise ConfigError(f"{what} must be positive, got {value!r}")
    return seconds


def pick(flag: Any, config: dict[str, Any], key: str, default: Any = None) -> Any:
    """A command-line flag when given, else the file's value, else `default`."""
    if flag is not None:
        return flag
    return config.get(key, default)


def collector_db_url(trainer: Mapping[str, Any]) -> str:
    """`[trainer].db` (or the flag over it), else the collector's SQLite file under $LOOPLIFT_HOME."""
    return trainer.get("db") or f"sqlite:///{looplift_home() / 'collector.db'}"


def job_config(cfg: LoopliftConfig, *, admin_token: Optional[str] = None, **flags: Any) -> "JobConfig":
    """The `JobConfig` from command-line `flags` (named like the `[trainer]` keys; None = not given), the
    file's `[trainer]`, `[gate]`, `[sft]`, `[dpo]` and `[grpo]` sections, and the defaults — in that order."""
    from ._dist import DistConfig
    from ._gate import GateConfig
    from ._job import JobConfig
    from ._suites import is_suite_file

    unknown = set(flags) - set(SCHEMA["trainer"]) - {"alpha", "slice_tolerance"}
    if unknown:  # pragma: no cover - a programming error in a caller
        raise TypeError(f"unknown job flags {sorted(unknown)}")
    t = {**cfg.trainer, **{k: v for k, v in flags.items() if v is not None and k in SCHEMA["trainer"]}}
    spec = t.get("eval")
    holdout = t.get("holdout")
    if holdout is None and spec and is_suite_file(spec):
        from ._prompt_suite import suite_holdout

        holdout = suite_holdout(Path(spec))
    if t.get("base_model"):
        model_dir = Path(t["base_model"])
    else:
        from ._base_model import base_model_dir

        model_dir = base_model_dir()
    try:
        gate = GateConfig(alpha=float(pick(flags.get("alpha"), cfg.gate, "alpha", D.GATE_ALPHA)),
                          slice_tolerance=float(pick(flags.get("slice_tolerance"), cfg.gate, "slice_tolerance",
                                                     D.GATE_SLICE_TOLERANCE)),
                          report_fraction=float(cfg.gate.get("report_fraction", D.GATE_REPORT_FRACTION)),
                          retries=cfg.gate.get("retries", D.GATE_EVAL_RETRIES))
        algos = {section: _algo_config(section)(**getattr(cfg, section)) for section in _ALGO_CONFIGS}
        canary = None if t.get("canary") is None else float(t["canary"])
        if canary is not None and not 0.0 < canary < 1.0:
            raise ValueError(f"canary must be a share of traffic strictly between 0 and 1, got {canary}")
        dist = DistConfig(nproc=int(t.get("nproc", D.NPROC)), strategy=t.get("strategy", D.STRATEGY))
        gateway_wait = _gateway_wait(t.get("gateway_wait", D.GATEWAY_CONNECT_WAIT_S))
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None
    return JobConfig(
        base_model_dir=model_dir,
        collector_db=collector_db_url(t),
        gateway_url=t.get("gateway", D.GATEWAY_URL), gateway_wait_s=gateway_wait, admin_token=admin_token,
        alias=t.get("alias", D.ALIAS),
        app=t.get("app"), eval=spec, algo=t.get("algo", D.ALGO), min_reward=float(t.get("min_reward", D.MIN_REWARD)),
        min_score=None if t.get("min_score") is None else float(t["min_score"]),
        min_examples=int(t.get("min_examples", D.MIN_EXAMPLES)), holdout=None if holdout is None else float(holdout),
        gate=gate, eval_seed=t.get("eval_seed"), eval_concurrency=int(t.get("eval_concurrency", D.EVAL_CONCURRENCY)),
        **algos, runs_dir=Path(t["runs_dir"]) if t.get("runs_dir") else None, canary=canary, dist=dist,
    )


def _gateway_wait(value: Any) -> float:
    """`gateway_wait`: a duration, or 0 (fail at once when the gateway refuses connections)."""
    if value in (0, "0", "0s"):
        return 0.0
    return parse_duration(value, "gateway_wait")


def schedule_config(cfg: LoopliftConfig, **flags: Any) -> "ScheduleConfig":
    """The `ScheduleConfig` from command-line `flags` (named like the `[schedule]` keys), then the file."""
    from ._schedule import ScheduleConfig

    s = {**cfg.schedule, **{k: v for k, v in flags.items() if v is not None}}
    return ScheduleConfig(
        cron=s.get("cron"), new_data=s.get("new_data"), drift=None if s.get("drift") is None else float(s["drift"]),
        drift_window_s=parse_duration(s.get("drift_window", D.DRIFT_WINDOW_S), "drift_window"),
        drift_min_episodes=int(s.get("drift_min_episodes", D.DRIFT_MIN_EPISODES)),
        poll_s=parse_duration(s.get("poll", D.POLL_S), "poll"),
    )


def canary_config(cfg: LoopliftConfig, **flags: Any) -> "CanaryConfig":
    """The `CanaryConfig` from command-line `flags` (named like the `[canary]` keys), then the file."""
    from ._canary import CanaryConfig, WatchConfig

    c = {**cfg.canary, **{k: v for k, v in flags.items() if v is not None}}
    watch = WatchConfig(window_s=parse_duration(c.get("watch", D.CANARY_WATCH_S), "watch"),
                        min_samples=int(c.get("watch_min_samples", D.CANARY_WATCH_MIN_SAMPLES)),
                        tolerance=float(c.get("watch_tolerance", D.CANARY_WATCH_TOLERANCE)))
    return CanaryConfig(alpha=float(c.get("alpha", D.CANARY_ALPHA)), min_samples=int(c.get("min_samples", D.CANARY_MIN_SAMPLES)),
                        max_samples=int(c.get("max_samples", D.CANARY_MAX_SAMPLES)), watch=watch,
                        poll_s=parse_duration(c.get("poll", D.CANARY_POLL_S), "poll"))
