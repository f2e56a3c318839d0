"""The offline checker of a chaos history (pure: a history file in, violations out).

Invariants checked on the client operations (``commit``, ``fetch``, and ``delete`` of a group), in the
order the history records events (line order, not the clocks):

* ``lost-acked-commit`` -- a fetch invoked after a commit of offset o to a partition was acknowledged
  returns less than o (the workload's commits per partition only grow, as a consumer's do);
* ``offset-went-backwards`` -- a fetch invoked after another fetch of the same partition completed
  returns less than that one did;
* ``deleted-group-came-back`` -- a fetch invoked after a group's deletion was acknowledged returns a
  committed offset (not -1) although no commit to the group could have come after the deletion (none was
  invoked after it, none was in flight when it was invoked);
* ``resume-below-committed`` -- a consumer resumed a newly assigned partition (its ``resume``: the committed
  offset it fetched) below an offset whose commit had been acknowledged before it fetched (a ``resume``
  is a fetch for the other checks too).

``membership_checks`` adds the invariants on generations and assignments and on the shards' own records
(the audit at the end of a run). With compaction rounds in the run (process ``compaction``):

* ``swap-without-proof`` -- a round swapped a partition's segments although their equivalence proof did
  not hold (the job must leave such a partition as it was).

A deletion resets what the first two expect of its group; a fetch that overlaps a deletion checks
nothing; a deletion whose outcome is unknown (``info``, or still open) stops checking its group from then
on, since it may take effect at any later time, and a commit of unknown outcome counts as in flight for
good (it may still be applied). Commits and fetches whose outcome is unknown or failed set no
expectation. These are Jepsen's linearizability checks narrowed to what a monotonic offsets workload makes checkable without a search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raygroups.chaos import membership_checks
from raygroups.chaos.history import History, HistoryError, Operation, is_injection
from raygroups.coordinator.checks import is_int

INVARIANTS = ("lost-acked-commit", "offset-went-backwards", "deleted-group-came-back", "resume-below-committed",
              *membership_checks.MEMBERSHIP_INVARIANTS, *membership_checks.AUDIT_INVARIANTS, "swap-without-proof")
Key = tuple[str, str, int]


@dataclass
class Violation:
    invariant: str
    key: Key
    message: str
    operations: list[Operation]

    def to_dict(self) -> dict:
        group, topic, partition = self.key
        return {"invariant": self.invariant, "group": group, "topic": topic, "partition": partition,
                "message": self.message, "operations": [op.to_dict() for op in self.operations]}


@dataclass
class CheckResult:
    violations: list[Violation] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)
    faults: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict:
        return {"ok": self.ok, "violations": [v.to_dict() for v in self.violations], "operations": self.operations,
                "faults_injected": self.faults, "invariants": list(INVARIANTS)}


def _key(op: Operation, line: int) -> Key:
    value = op.invoke.value
    try:
        group, topic, partition = value["group"], value["topic"], value["partition"]
    except KeyError as e:
        raise HistoryError(f"line {line}: a {op.f} needs group, topic and partition in its value; {e} is missing") \
            from None
    if not isinstance(group, str) or not isinstance(topic, str) or not is_int(partition):
        raise HistoryError(f"line {line}: group and topic must be strings and partition an int")
    return group, topic, partition


def _offset(value: dict, op: Operation, line: int) -> int:
    offset = value.get("offset")
    if not is_int(offset) or offset < -1:
        raise HistoryError(f"line {line}: a {op.f} needs an int offset >= -1 in its value, got {offset!r}")
    return offset


@dataclass
class _Best:
    """The highest offset established for a key, and by which operation."""

    offset: int
    op: Operation


@dataclass
class _GroupState:
    epoch: int = 0  # acknowledged deletions so far
    uncertain: bool = False  # a deletion of unknown outcome: no more checks on this group
    open_commits: set = field(default_factory=set)  # and those of unknown outcome: they may still land
    last_commit_invoked: int = 0  # line of the latest commit invocation
    open_deletes: set = field(default_factory=set)
    last_delete_invoked: int = 0
    deleted_by: Operation | None = None  # the last acknowledged deletion, while nothing can have undone it


def check(history: History) -> CheckResult:
    result = CheckResult(operations=history.counts(), faults=sum(1 for ev in history.faults if is_injection(ev)))
    _offsets(history, result)

    def violation(invariant: str, key: Key, message: str, operations: list[Operation]) -> None:
        result.violations.append(Violation(invariant, key, message, operations))

    membership_checks.exclusive_ownership(history, violation)
    membership_checks.generations(history, violation)
    membership_checks.rebalance_on_failover(history, violation)
    membership_checks.audit(history, violation)
    _compaction_swaps(history, violation)
    return result


def _compaction_swaps(history: History, violation) -> None:
    for op in history.operations:
        if op.f != "compact" or op.type != "ok":
            continue
        value = op.complete.value
        for p in value.get("unproved_swaps") or []:
            violation("swap-without-proof", ("", "__consumer_offsets", int(p)),
                      f"compaction round {value.get('round')} swapped partition {p} without an equivalence proof "
                      f"that held ({op.describe()})", [op])


def _offsets(history: History, result: CheckResult) -> None:
    """The invariants on committed offsets, in one pass over the events in line order."""
    groups: dict[str, _GroupState] = {}
    acked: dict[Key, _Best] = {}
    fetched: dict[Key, _Best] = {}
    # What each operation saw when it was invoked, by its invocation's line.
    at_invoke: dict[int, tuple] = {}
    op_of: dict[int, Operation] = {}
    for op in history.operations:
        op_of[op.invoke.line] = op
        if op.complete is not None:
            op_of[op.complete.line] = op

    def group_state(name: str) -> _GroupState:
        return groups.setdefault(name, _GroupState())

    for ev in history.events:
        op = op_of.get(ev.line)
        if op is None or op.f not in ("commit", "fetch", "resume", "delete"):
            continue  # a fault, or an operation these invariants do not read
        if op.f == "delete":
            group = op.invoke.value.get("group")
            if not isinstance(group, str):
                raise HistoryError(f"line {ev.line}: a delete needs the group's name in its value")
            g = group_state(group)
            if ev.type == "invoke":
                at_invoke[ev.line] = (bool(g.open_commits),)
                g.open_deletes.add(ev.line)
                g.last_delete_invoked = ev.line
                if op.complete is None or op.type == "info":
                    g.uncertain = True
                continue
            g.open_deletes.discard(op.invoke.line)
            if ev.type == "ok":
                g.epoch += 1
                for table in (acked, fetched):
                    for key in [k for k in table if k[0] == group]:
                        del table[key]
                # The group stays deleted unless a commit may come after the deletion: one in flight when it
                # was invoked, or one invoked since.
                in_flight = at_invoke[op.invoke.line][0] or g.last_commit_invoked > op.invoke.line
                g.deleted_by = None if in_flight else op
            continue
        key = _key(op, ev.line)
        g = group_state(key[0])
        if ev.type == "invoke":
            at_invoke[ev.line] = (g.epoch, acked.get(key), fetched.get(key), g.deleted_by, bool(g.open_deletes))
            if op.f == "commit":
                g.open_commits.add(ev.line)
                g.last_commit_invoked = ev.line
                g.deleted_by = None  # this commit may recreate the group
            continue
        epoch, acked_then, fetched_then, deleted_then, deleting = at_invoke[op.invoke.line]
        if op.f == "commit":
            if ev.type != "info":  # one of unknown outcome may still be applied at any later time
                g.open_commits.discard(op.invoke.line)
            if ev.type == "ok" and epoch == g.epoch:
                offset = _offset(op.invoke.value, op, op.invoke.line)
                if key not in acked or offset > acked[key].offset:
                    acked[key] = _Best(offset, op)
            continue
        if ev.type != "ok":
            continue
        offset = _offset(ev.value, op, ev.line)
        if g.uncertain or epoch != g.epoch or deleting or g.last_delete_invoked > op.invoke.line:
            continue  # a deletion may have come before or after this fetch: nothing to expect of it
        where = f"group {key[0]!r} topic {key[1]!r} partition {key[2]}"
        if acked_then is not None and offset < acked_then.offset:
            result.violations.append(Violation(
                "lost-acked-commit" if op.f == "fetch" else "resume-below-committed", key,
                f"{where}: {op.describe()} returned {offset}, but a commit of {acked_then.offset} had been "
                f"acknowledged before it was invoked ({acked_then.op.describe()})", [acked_then.op, op]))
        if fetched_then is not None and offset < fetched_then.offset:
            result.violations.append(Violation(
                "offset-went-backwards", key,
                f"{where}: {op.describe()} returned {offset}, but an earlier fetch had returned "
                f"{fetched_then.offset} ({fetched_then.op.describe()})", [fetched_then.op, op]))
        if deleted_then is not None and offset >= 0:
            result.violations.append(Violation(
                "deleted-group-came-back", key,
                f"{where}: {op.describe()} returned {offset}, but the group's deletion had been acknowledged "
                f"({deleted_then.describe()}) and no commit could have come after it", [deleted_then, op]))
        if key not in fetched or offset > fetched[key].offset:
            fetched[key] = _Best(offset, op)
