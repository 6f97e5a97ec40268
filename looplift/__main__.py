"""`python -m looplift` is the `looplift` command."""

from ._cli import main

main()
