"""The `server` command line: `app` (typer; mounted as `looplift server`) and `main()`.

It starts the gateway over vLLM and loads, promotes and rolls back versions (`server._cli`).
Public so that `looplift` and the console scripts need not import the private module; `import server`
does not import this one, so the library stays free of typer and rich. Runs as `python -m server.cli`.
"""

from __future__ import annotations

from ._cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
