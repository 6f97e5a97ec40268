"""The `trainer` command line: `app` (typer; mounted as `looplift trainer`) and `main()` (`python -m trainer.cli`).

The `trainer` console script goes through looplift, which names the extra to install when it is missing.

It runs the retrain job and its scheduler, the canary, eval suites and SFT (`trainer._cli`).
Public so that `looplift` need not import the private module; `import trainer`
does not import this one, so the library stays free of typer and rich. Runs as `python -m trainer.cli`.
"""

from __future__ import annotations

from ._cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
