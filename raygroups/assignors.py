"""Client-side partition assignors (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``).

The implementation lives in the pure client package, :mod:`raygroups.membership.assignors` (see its docstring for what each
assignor guarantees); this module re-exports its public API unchanged, so ``from raygroups.assignors
import X`` and ``raygroups.assignors.get_assignor(name)`` name the very same objects.
"""

from raygroups.membership.assignors import *  # noqa: F403  (the public API, re-exported unchanged)
from raygroups.membership.assignors import __all__  # noqa: F401
