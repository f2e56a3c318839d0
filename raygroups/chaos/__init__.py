"""The failover chaos benchmark's history and its offline checker.

``history`` reads and validates ``history.jsonl`` (the pinned schema: Jepsen's invoke/ok/fail/info events
per process, faults as the nemesis's ``info`` events); ``checker.check`` finds the violations of the
invariants it names. ``raygroups chaos check HISTORY [--json]`` is the command line. The benchmark that
writes histories is to come.
"""

from raygroups.chaos.checker import INVARIANTS, CheckResult, Violation, check
from raygroups.chaos.history import History, HistoryError, read_history

__all__ = ["INVARIANTS", "CheckResult", "History", "HistoryError", "Violation", "check", "read_history"]
