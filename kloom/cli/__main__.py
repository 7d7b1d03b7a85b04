"""``python -m kloom.cli``: the kloom command without an installed entry point (GPU machines)."""

from . import main

main()
