"""looplift collector: every finished episode is anonymized, scored and stored here, and curated
into training data by `collector export`.

Public API:

- `CollectorSettings`, `create_app`, `serve_in_thread` / `ServerHandle`: the ingest service.
- `Store`, `open_store`, `CollectorStats`, `GroupStats`, `WindowStats`: the database (SQLite or Postgres,
  schema by Alembic migrations).
- `anonymize_text`, `anonymize_trajectory`, `AnonymizerState`, `Entity`: the anonymizer.
- `export`, `ExportManifest`, `ExportFilters`: training data export.
- `record_event`: hand the collector a record its dashboard shows (the trainer's retrain runs).
- `LangfuseSettings`: the Langfuse export (`CollectorSettings.langfuse`); the dashboard is served at `/dashboard`.
- errors: `CollectorError` and its subclasses (see `collector.errors`).
"""

from __future__ import annotations

from ._anonymize import Anonymizer, AnonymizerState, Entity, anonymize_text, anonymize_trajectory
from ._app import create_app
from ._events import record_event
from ._export import export
from ._export_manifest import ExportFilters, ExportManifest
from ._purge import PurgeResult
from ._serve import ServerHandle, serve_in_thread
from ._settings import CollectorSettings, LangfuseSettings
from ._store import CollectorStats, GroupStats, Store, WindowStats, open_store
from .errors import (
    CollectorError,
    ConfigError,
    ExportError,
    MigrationError,
    StorageError,
    UnknownResponseError,
    UnknownTrajectoryError,
    UnsupportedFormatError,
)

__all__ = [
    "Anonymizer",
    "AnonymizerState",
    "CollectorError",
    "CollectorSettings",
    "CollectorStats",
    "ConfigError",
    "Entity",
    "ExportError",
    "ExportFilters",
    "ExportManifest",
    "GroupStats",
    "LangfuseSettings",
    "MigrationError",
    "PurgeResult",
    "ServerHandle",
    "StorageError",
    "Store",
    "UnknownResponseError",
    "UnknownTrajectoryError",
    "UnsupportedFormatError",
    "WindowStats",
    "anonymize_text",
    "anonymize_trajectory",
    "create_app",
    "export",
    "open_store",
    "record_event",
    "serve_in_thread",
]
