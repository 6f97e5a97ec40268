"""How every looplift command prints a table: whole, on a terminal and in a log alike.

rich fits a table to its console's width: the terminal's, or 80 columns when the output is not a
terminal (a log file, a pipe, CI), where the columns then wrap and values longer than their column end
in "…". `print_table` gives such a table the width it needs instead; on a terminal it prints as rich
does (fitted to the window). Duck-typed on rich's `Console`: the SDK does not depend on rich (the
`cli` extra does), so nothing here imports it at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

#: The widest a table is measured at (an upper bound for `Console.measure`, not a width anyone gets).
_MEASURE_WIDTH = 4096


def print_table(console: Console, table: RenderableType) -> None:
    """Print `table` (a rich `Table`, or any renderable) on `console` without cutting it.

    On a terminal, as `console.print` does. Elsewhere, at the table's natural width when that is wider
    than the console's (rich's default there is 80 columns), so each cell stays on one line, whole."""
    if _is_tty(console):
        console.print(table)
        return
    width = console.width
    need = console.measure(table, options=console.options.update_width(_MEASURE_WIDTH)).maximum
    if need <= width:
        console.print(table)
        return
    console.width = need
    try:
        console.print(table)
    finally:
        console.width = width


def _is_tty(console: Console) -> bool:
    """Whether `console` writes to a terminal itself: not `console.is_terminal`, which `FORCE_COLOR` (set
    in many CI systems for colours in their logs) turns on although the width is then rich's 80 columns."""
    try:
        return bool(console.file.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed file
        return False
