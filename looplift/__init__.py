"""looplift: the composition root.

The `looplift` command (`up`, `demo` and the component groups `server`, `collector`, `trainer`,
`sandbox`) and the code that wires the components into one running stack (`_stack`) and into the demo's
closed loop (`_demo`). It imports the other packages, lazily, so that a partial install still runs what
it has; no other package imports it (import-linter checks that in `make lint`).
"""

from ._cli import main

__all__ = ["main"]
