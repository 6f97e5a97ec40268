"""What an export records about itself: its filters, its manifest, and where its files go.

`ExportManifest` is written as `FILE.manifest.json` next to `FILE.jsonl` (`manifest_path_for`); the
holdout file is `FILE.holdout.jsonl` (`holdout_path_for`), and `in_holdout` decides a task's side by
a hash of its id, so a task is always on the same side, in every export. Deliberately not here:
computing any of it (`_export.py`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._shingle import unit_hash


class ExportFilters(BaseModel):
    """The filters and curation steps an export applied (recorded in its manifest)."""

    model_config = ConfigDict(frozen=True)

    min_reward: float | None = Field(default=None, description="keep trajectories with reward >= this")
    min_score: float | None = Field(default=None, description="keep trajectories with score >= this (or a correction)")
    app: str | None = Field(default=None, description="keep only this app")
    task: str | None = Field(default=None, description="keep only this task id")
    model_version: str | None = Field(default=None, description="keep only this served version")
    since: datetime | None = Field(default=None, description="ingested at or after (UTC)")
    until: datetime | None = Field(default=None, description="ingested before (UTC); the snapshot time when unset")
    limit: int | None = Field(default=None, description="at most this many lines in the output file")
    dedup: bool = Field(default=False, description="exact (content hash) and near-duplicate (MinHash LSH) removal")
    balance: str | None = Field(default=None, description="`task` or `cluster`: equalize groups")
    per_group: int | None = Field(default=None, description="balance: expected rows per group (resolved value)")
    holdout: float | None = Field(default=None, description="fraction of tasks sent to the holdout file")
    decontaminate: str | None = Field(default=None, description="eval JSONL file compared against")
    decontaminate_sha256: str | None = Field(default=None, description="sha256 of that eval file")
    ngram: int | None = Field(default=None, description="decontamination n-gram length")
    corrections: bool = Field(default=True, description="user corrections become SFT targets and DPO pairs")


class HoldoutInfo(BaseModel):
    """The holdout file written beside the output."""

    model_config = ConfigDict(frozen=True)

    path: str
    fraction: float
    count: int = Field(description="lines in the holdout file")
    tasks: int = Field(description="distinct tasks in it")
    sha256: str
    bytes: int


class ExportManifest(BaseModel):
    """What an export wrote; saved as `FILE.manifest.json` next to `FILE.jsonl`."""

    model_config = ConfigDict(frozen=True)

    format: str = Field(description="export format: sft, dpo or grpo")
    path: str = Field(description="the JSONL file written")
    count: int = Field(description="lines written to `path`")
    by_app: dict[str, int] = Field(description="lines per app in `path`")
    trajectories: int = Field(default=0, description="distinct trajectories used in `path`")
    tasks: int = Field(default=0, description="distinct tasks in `path`")
    matched: int = Field(default=0, description="trajectories matching the filters (before curation)")
    dropped: dict[str, int] = Field(default_factory=dict, description="trajectories dropped, per reason")
    holdout: HoldoutInfo | None = None
    filters: ExportFilters
    quality_model: dict[str, Any] | None = Field(default=None, description="id and held-out AUC of the quality model")
    created_at: datetime = Field(description="when the export ran (UTC)")
    sha256: str = Field(description="sha256 of the JSONL file")
    bytes: int = Field(description="size of the JSONL file")
    db: str = Field(description="database URL, password hidden")

    @property
    def manifest_path(self) -> Path:
        """Where this manifest is written."""
        return manifest_path_for(self.path)


def manifest_path_for(out_path: str | Path) -> Path:
    """`data.jsonl` -> `data.manifest.json`."""
    p = Path(out_path)
    return p.with_name(p.stem + ".manifest.json") if p.suffix else p.with_name(p.name + ".manifest.json")


def holdout_path_for(out_path: str | Path) -> Path:
    """`data.jsonl` -> `data.holdout.jsonl`."""
    p = Path(out_path)
    return p.with_name(p.stem + ".holdout" + (p.suffix or ".jsonl"))


def in_holdout(task_id: str, fraction: float) -> bool:
    """Whether `task_id` goes to the holdout file (deterministic; the same task always the same side)."""
    return unit_hash("holdout:" + task_id) < fraction
