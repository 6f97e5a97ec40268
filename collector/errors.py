"""The collector's exception tree. Every message says what went wrong and how to fix it.

    CollectorError                 base of everything below
    ├── ConfigError                a setting or CLI argument is invalid (also a ValueError)
    ├── StorageError               the database could not be opened, migrated or written
    │   ├── StorageFullError       its disk (or quota) is full: nothing of the write was stored
    │   └── MigrationError         Alembic could not bring the schema to `head`
    ├── UnknownTrajectoryError     feedback or a lookup named a trajectory id that is not stored
    ├── UnknownResponseError       feedback named a response id no captured trajectory holds
    └── ExportError                `export()` could not write its output
        └── UnsupportedFormatError the export format is not one of sft, dpo, grpo (also a ValueError)

Expected outcomes (a duplicate trajectory, a trajectory with no outcome) are data, not errors.
"""

from __future__ import annotations


class CollectorError(Exception):
    """Base class of every error the collector raises on purpose."""


class ConfigError(CollectorError, ValueError):
    """A setting or CLI argument is invalid; the message names it and the accepted values."""


class StorageError(CollectorError):
    """The database could not be opened, migrated or written."""


class StorageFullError(StorageError):
    """The database's disk (or quota) is full; the write was rolled back whole. HTTP: 507, retry later."""


class MigrationError(StorageError):
    """Alembic could not upgrade the schema to `head`."""


class UnknownTrajectoryError(CollectorError, LookupError):
    """A trajectory id that is not stored (feedback must follow the trajectory it rates)."""

    def __init__(self, trajectory_id: str) -> None:
        self.trajectory_id = trajectory_id
        super().__init__(
            f"unknown trajectory id {trajectory_id!r}: feedback joins an already ingested trajectory; "
            "send the trajectory to POST /v1/trajectories first (the SDK spool does this on flush)"
        )


class UnknownResponseError(CollectorError, LookupError):
    """No stored trajectory holds a completion with this response id (feedback by `response_id`)."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        super().__init__(
            f"unknown response id {response_id!r}: no captured exchange has it. Feedback by response id joins "
            "completions the gateway captured: start it with capture on (`looplift up --capture`, or a capture "
            "key), and send the `id` of the chat completion exactly as the client received it"
        )


class ExportError(CollectorError):
    """`export()` could not produce its output."""


class UnsupportedFormatError(ExportError, ValueError):
    """The requested export format is not one of `sft`, `dpo`, `grpo`; the message lists them."""
