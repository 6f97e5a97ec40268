"""The task families this package ships, by name: `looplift env list` / `env try` and eval suites read it.

Each entry is a zero-argument loader, so listing the families imports none of them (a family may need
heavy packages — reportlab and pdfplumber for extraction, trimesh and the 3D sandbox image for modeling — only
when it is loaded).
"""

from __future__ import annotations

from typing import Callable

from sdk import EnvFamily


def _extraction() -> EnvFamily:
    from ._extraction import family

    return family()


def _modeling() -> EnvFamily:
    from ._modeling import family

    return family()


def env_families() -> dict[str, Callable[[], EnvFamily]]:
    """Every task family, name -> loader (call it to get the `sdk.EnvFamily`)."""
    return {"extraction": _extraction, "modeling": _modeling}
