"""The SDK's exception tree. Expected outcomes (a failed task, a collector that is down) are data, not
exceptions; these are raised only for misuse the caller must fix."""


class LoopliftError(Exception):
    """Base of every looplift SDK error."""


class ConfigError(LoopliftError):
    """Bad arguments or settings; the message says which and how to fix it."""


class GenerationError(LoopliftError):
    """The model server failed in a way retrying will not fix (e.g. unknown model)."""
