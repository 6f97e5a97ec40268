"""`collector export --format langfuse-dataset`: a curated export as a Langfuse dataset for offline evaluation.

The export is the `sft` one (same filters, dedup, balance, decontamination, holdout; the JSONL and its
manifest are written as usual), then each line becomes one dataset item:

    input            the prompt: the messages before the first assistant message
    expected_output  the verified completion: the messages from the first assistant message on (with a user
                     correction, the SFT export's: up to the corrected message, which the correction replaces)
    metadata         trajectory id, task id, app, served version, reward, score, corrected
    source_trace_id  the trace the collector exported for that trajectory (when the Langfuse export was on)

Item ids derive from the dataset name and the trajectory id, so pushing the same export again updates the
items instead of adding copies. The text is the stored text, anonymized at ingest. Deliberately not here:
running experiments on the dataset (`Langfuse.run_experiment` does that against any task function).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._langfuse import langfuse_client, trace_id_for
from ._settings import LangfuseSettings
from .errors import ExportError


@dataclass(frozen=True)
class DatasetPush:
    """What `push_dataset` sent."""

    dataset: str
    items: int
    host: str | None


def _split(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    k = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return messages[:k], messages[k:]


def push_dataset(jsonl: str | Path, name: str, settings: LangfuseSettings, *, description: str | None = None,
                 httpx_client: Any = None) -> DatasetPush:
    """Create (or update) the Langfuse dataset `name` from an `sft` export file, one item per line.

    Raises:
        ExportError: Langfuse refused or could not be reached (the message says after how many items).
    """
    n = 0
    try:
        n = _push(jsonl, name, settings, description, httpx_client)
    except Exception as e:  # the SDK raises its own API errors, httpx errors, pydantic errors: one line
        raise ExportError(f"pushing the Langfuse dataset {name!r} to {settings.host or 'Langfuse Cloud'} failed: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (re-running updates the "
                          "items already sent, it does not duplicate them)") from e
    return DatasetPush(name, n, settings.host)


def _push(jsonl: str | Path, name: str, settings: LangfuseSettings, description: str | None, httpx_client: Any) -> int:
    client = langfuse_client(settings, httpx_client=httpx_client)
    client.create_dataset(name=name, description=description or f"looplift curated export {Path(jsonl).name}",
                          metadata={"source": "looplift collector export", "file": str(jsonl)})
    n = 0
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            prompt, completion = _split(row["messages"])
            client.create_dataset_item(
                dataset_name=name, input=prompt, expected_output=completion,
                metadata={k: row.get(k) for k in ("id", "task_id", "app", "served_version", "reward", "score", "corrected")},
                source_trace_id=trace_id_for(row["id"]),
                id="looplift-" + hashlib.sha256(f"{name}\0{row['id']}".encode()).hexdigest()[:32])
            n += 1
    return n
