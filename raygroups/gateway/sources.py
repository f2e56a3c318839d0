"""``MODULE:ATTR`` names a source for a listener started outside Python code (the ``raygroups gateway``
command, each node's listener): the attribute is a ``raygroups.Source``, or a callable without arguments
that returns one (resolved in the process that serves it)."""

from __future__ import annotations

import importlib

from raygroups.sources import Source


def load_source(spec: str) -> Source:
    """The source ``spec`` (``MODULE:ATTR``) names; ValueError saying what is wrong with it."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"a source must be given as MODULE:ATTR (for example mypkg.sources:events), got {spec!r}")
    module_name, attr = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import the source module {module_name!r}: {e}") from None
    value = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    if isinstance(value, type) or (not isinstance(value, Source) and callable(value)):
        try:
            value = value()
        except Exception as e:  # noqa: BLE001 - whatever the factory raised, said in one sentence
            raise ValueError(f"{spec}() failed: {type(e).__name__}: {e}") from None
    if not isinstance(value, Source):
        raise ValueError(f"{spec} is a {type(value).__name__}, not a raygroups.Source (topics, read, end_offset) "
                         f"or a callable returning one")
    return value
