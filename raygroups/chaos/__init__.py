"""The failover chaos benchmark: a workload under seeded faults, its history, the offline checker, the report.

Pure (no Ray): ``history`` reads and validates ``history.jsonl`` (the pinned schema: Jepsen's
invoke/ok/fail/info events per process, faults as the nemesis's ``info`` events); ``checker`` and
``membership_checks`` find the violations of the invariants they name; ``faults`` is the catalogue and
the seeded schedule; ``report`` derives ``report.json`` and ``timeline.png`` from a history.
On Ray: ``workload`` (consumer actors, probes, scratch groups, each recording its operations),
``nemesis`` (injects the faults), ``run`` (a whole run), ``live`` (the terminal view).
The command line: ``raygroups chaos run`` and ``raygroups chaos check HISTORY [--json]``.
"""

from raygroups.chaos.checker import INVARIANTS, CheckResult, Violation, check
from raygroups.chaos.history import History, HistoryError, read_history

__all__ = ["INVARIANTS", "CheckResult", "History", "HistoryError", "Violation", "check", "read_history"]
