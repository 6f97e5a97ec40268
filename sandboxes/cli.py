"""The `sandbox` command line: `app` (typer; mounted as `looplift sandbox`) and `main()`.

It builds the sandbox image, runs a command in a sandbox and shows the backend (`sandboxes._cli`).
Public so that `looplift` and the console scripts need not import the private module; `import sandboxes`
does not import this one, so the library stays free of typer and rich. Runs as `python -m sandboxes.cli`.
"""

from __future__ import annotations

from ._cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
