"""The tiny base model `looplift up` and `looplift demo` serve when no --model is given: built on the first
run (a few minutes of CPU training, with a progress bar), then read from the cache under LOOPLIFT_HOME.

Deliberately not here: how the model is built (`trainer.build_base_model`). Importing this module imports
`trainer` (torch); `looplift up --model DIR` never does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rich.progress import Progress
from trainer import BaseModelConfig, base_model_dir, build_base_model


def tiny_model(console: Any, cfg: Optional[BaseModelConfig] = None) -> Path:
    """The cached tiny base model for `cfg`, built first if needed. Says so in a line before building: a
    progress bar alone shows nothing until the end when the output is not a terminal."""
    cfg = cfg or BaseModelConfig()
    if not (base_model_dir(cfg) / "looplift.json").exists():
        console.print(f"building the tiny base model ({cfg.steps} steps; first run only, a few minutes) ...")
    with Progress(console=console) as p:
        bar = p.add_task("tiny base model (cached after the first build)", total=cfg.steps)
        model = build_base_model(cfg, progress=lambda s, n, loss: p.update(bar, completed=s))
        p.update(bar, completed=cfg.steps)
    return model
