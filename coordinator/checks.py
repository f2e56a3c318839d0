"""Argument checks every layer shares. Python's ``bool`` is an ``int``, and no count, epoch, offset or size
is a bool: ``is_int(True)`` is False."""

from __future__ import annotations


def is_int(value: object) -> bool:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An ``int`` or ``float`` that is not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool)
