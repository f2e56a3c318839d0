"""``python -m raygroups``: the command line (``raygroups.cli``)."""

from raygroups.cli import main

main()
