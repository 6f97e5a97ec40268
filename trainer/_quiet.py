"""Third-party progress bars off: transformers' "Loading weights" / "Writing model shards" and
huggingface_hub's bars would otherwise draw over (or, in a log, interleave with) our own rich progress
in `looplift demo`, `looplift up` and `trainer …` each time a model is loaded or saved.

`quiet_progress_bars()` runs once, when `trainer` is imported (`trainer/__init__.py`), before any of its
modules imports transformers. `HF_HUB_DISABLE_PROGRESS_BARS=1` (only when unset) turns both libraries'
bars off when they are imported later, in this process and in the processes it starts (torchrun's
workers); already imported, they are turned off directly. A user who sets `HF_HUB_DISABLE_PROGRESS_BARS=0`
keeps the bars. Cheap: imports nothing that is not imported yet.
"""

from __future__ import annotations

import os
import sys

ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


def quiet_progress_bars() -> None:
    """Turn off transformers' and huggingface_hub's progress bars unless `HF_HUB_DISABLE_PROGRESS_BARS` says
    otherwise."""
    os.environ.setdefault(ENV, "1")
    if os.environ[ENV].strip().upper() not in ("1", "ON", "YES", "TRUE"):  # huggingface_hub's truthy values
        return
    if "huggingface_hub" in sys.modules:  # read the variable at its import: tell it directly
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:  # its bars follow huggingface_hub's setting only from its own import on
        from transformers.utils import logging

        logging.disable_progress_bar()
