"""The `collector` command line: `app` (typer; mounted as `looplift collector`) and `main()` (`python -m collector.cli`).

The `collector` console script goes through looplift, which names the extra to install when it is missing.

It serves the collector and exports, scores, purges and anonymizes its data (`collector._cli`).
Public so that `looplift` need not import the private module; `import collector`
does not import this one, so the library stays free of typer and rich. Runs as `python -m collector.cli`.
"""

from __future__ import annotations

from ._cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
