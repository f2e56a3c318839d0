"""The checker's invariants on group membership and on the shards' own records (pure; see ``checker``).

Membership, from the consumers' ``assign`` operations (value: group, member, generation, partitions) and
the generations their ``commit`` operations carried. In a KIP-848 consumer group (the workload's
``start-consumer`` says ``group_protocol: consumer``) the ``generation`` is the member's epoch: each member
has its own, and a member that still has to revoke stays at its epoch while the others move on.

* ``exclusive-ownership`` -- two members of a group were assigned the same partition in one generation
  (in a consumer group: at one member epoch, i.e. in one target assignment. That a partition moves only
  once its previous owner let go cannot be told from the clients' side alone -- a member fenced without
  knowing it still believes it owns its partitions, as in Kafka -- so what the coordinator must enforce
  there, that such a zombie's commits are refused, is checked by the next invariant);
* ``generation-went-backwards`` -- an operation acknowledged at generation g was invoked after another
  operation of the same group (in a consumer group: of the same member) had been acknowledged at a
  generation above g (only acknowledged assignments and commits count: a JoinGroup answer is not durable,
  as in Kafka); in a consumer group also a commit of a partition acknowledged at a member epoch below the
  one another member had been assigned that partition at before the commit was invoked (a zombie's
  commit the coordinator should have refused);
* ``rebalance-on-failover`` -- a group reached a new generation (after the first one the history shows)
  with no membership change to cause it: no
  consumer started or stopped by the workload, no consumer's first join (its actor may start long after the
  workload asked for it), no consumer fault of that group, since the previous
  generation was acknowledged nor within the group's session plus rebalance timeout before the group was
  first seen rebalancing; the second round of a cooperative rebalance (after a generation that left
  partitions unowned) has its first round's cause (a coordinator failover alone must not make a group
  rebalance: the new coordinator loads the members and restarts their sessions). In a consumer group a new
  member epoch means the group epoch moved, and there is no second round: every new epoch needs a cause.
  A membership change the group's coordinator recorded in its log (process ``coordinator``:
  ``member-added`` / ``member-removed``, read back from every leader's log by the audit at the end of a
  run) between the acknowledgement of the previous generation and the new one (plus ``SLACK_S``) is a cause
  too, however long before it the client-side change was: a session expiry is the coordinator's decision,
  which no client records, and every failover restarts the members' sessions (as in Kafka), so a killed
  consumer may be expired, and its group rebalanced, long after the window above. The coordinator's records
  are timed on its wall clock (a batch's timestamp), converted to run time with the run's wall-clock start.
  Compaction may have dropped older ones: they are a lower bound, so a group with neither kind of change
  before a new generation is still a violation. Only changes the run explains count: a member removed whose
  consumer the run had lost (killed, paused, stopped) before, a member added for a new consumer or for one
  whose removal was so explained. A failover that loses members, which then rejoin under new ids, or that
  expires live members, explains nothing.

Shards' records, from the audit the benchmark runs at the end (process ``auditor``):

* ``single-writer-per-epoch`` -- a replica's batches go back to an older leader epoch, or two in-sync
  replicas differ below their common log end (batches, or the epochs they were written under: two
  writers, or a divergence the leader never truncated);
* ``replay-differs-from-live`` -- a leader's live state differs from a fresh replay of its log.
"""

from __future__ import annotations

from raygroups.chaos.faults import CONSUMER_FAULTS
from raygroups.chaos.history import History, HistoryError, Operation
from raygroups.coordinator.checks import is_int

MEMBERSHIP_INVARIANTS = ("exclusive-ownership", "generation-went-backwards", "rebalance-on-failover")
AUDIT_INVARIANTS = ("single-writer-per-epoch", "replay-differs-from-live")
DEFAULT_ALLOWANCE_S = 60.0
SLACK_S = 5.0  # a membership change noticed just after the rebalance it caused (a consumer that exits)


def _int(value: dict, key: str, op: Operation) -> int:
    v = value.get(key)
    if not is_int(v):
        raise HistoryError(f"line {op.invoke.line}: a {op.f} needs an int {key} in its value, got {v!r}")
    return v


def _str(value: dict, key: str, op: Operation) -> str:
    v = value.get(key)
    if not isinstance(v, str):
        raise HistoryError(f"line {op.invoke.line}: a {op.f} needs a string {key} in its value, got {v!r}")
    return v


def _value(op: Operation) -> dict:
    return op.complete.value if op.complete is not None and op.complete.value else op.invoke.value


def protocols(history: History) -> dict[str, str]:
    """Per group, the protocol its consumers speak, from the workload's ``start-consumer`` operations
    (``classic`` when they do not say: Kafka's default group.protocol)."""
    out: dict[str, str] = {}
    for op in history.operations:
        if op.f == "start-consumer" and isinstance(op.invoke.value.get("group"), str):
            protocol = op.invoke.value.get("group_protocol", "classic")
            if protocol not in ("classic", "consumer"):
                raise HistoryError(f"line {op.invoke.line}: group_protocol must be classic or consumer, got "
                                   f"{protocol!r}")
            out[op.invoke.value["group"]] = protocol
    return out


def _generation_word(protocol: str) -> str:
    return "member epoch" if protocol == "consumer" else "generation"


def exclusive_ownership(history: History, violation) -> None:
    protocol = protocols(history)
    owner: dict[tuple[str, int, str, int], Operation] = {}
    for op in history.operations:
        if op.f != "assign" or op.type != "ok":
            continue
        value = _value(op)
        group, member, generation = _str(value, "group", op), _str(value, "member", op), _int(value, "generation", op)
        partitions = value.get("partitions")
        if not isinstance(partitions, list):
            raise HistoryError(f"line {op.invoke.line}: an assign needs a list of [topic, partition] in partitions")
        for tp in partitions:
            if not (isinstance(tp, list) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int)):
                raise HistoryError(f"line {op.invoke.line}: assign partitions entries must be [topic, partition]")
            key = (group, generation, tp[0], tp[1])
            first = owner.setdefault(key, op)
            if _value(first)["member"] != member:
                violation("exclusive-ownership", (group, tp[0], tp[1]),
                          f"group {group!r} {_generation_word(protocol.get(group, 'classic'))} {generation}: "
                          f"{tp[0]}:{tp[1]} was assigned to member "
                          f"{_value(first)['member']!r} ({first.describe()}) and to member {member!r} "
                          f"({op.describe()})", [first, op])


def generations(history: History, violation) -> None:
    """``generation-went-backwards`` in line order: what each operation saw acknowledged when invoked (per
    group; per member in a consumer group, where a commit of a partition is also held to the epoch its
    newest owner was assigned it at: a member's older epoch for it is a zombie's)."""
    protocol = protocols(history)
    highest: dict[tuple[str, ...], tuple[int, Operation]] = {}
    owner: dict[tuple[str, str, int], tuple[int, str, Operation]] = {}  # consumer groups: newest assignee
    seen_at_invoke: dict[int, tuple] = {}
    by_line = {}
    for op in history.operations:
        if op.f in ("assign", "commit") and "generation" in op.invoke.value:
            by_line[op.invoke.line] = op
            if op.complete is not None:
                by_line[op.complete.line] = op
    for ev in history.events:
        op = by_line.get(ev.line)
        if op is None:
            continue
        group = _str(op.invoke.value, "group", op)
        generation = _int(op.invoke.value, "generation", op)
        consumer = protocol.get(group) == "consumer"
        member = _str(op.invoke.value, "member", op) if consumer else ""
        key = (group, member) if consumer else (group,)
        tp = None
        if consumer and op.f == "commit":
            tp = (group, _str(op.invoke.value, "topic", op), _int(op.invoke.value, "partition", op))
        if ev.type == "invoke":
            seen_at_invoke[ev.line] = (highest.get(key), owner.get(tp) if tp else None)
            continue
        # A consumer-protocol member's epoch 0 is its join, never an epoch anything is acknowledged at.
        if ev.type != "ok" or generation < (1 if consumer else 0):
            continue
        before, assignee = seen_at_invoke.get(op.invoke.line, (None, None))
        word = _generation_word(protocol.get(group, "classic"))
        if before is not None and generation < before[0]:
            whose = f"group {group!r} member {member!r}" if consumer else f"group {group!r}"
            violation("generation-went-backwards", (group, "", -1),
                      f"{whose}: {op.describe()} was acknowledged at {word} {generation}, but {word} {before[0]} "
                      f"had been acknowledged before it was invoked ({before[1].describe()})", [before[1], op])
        if assignee is not None and assignee[1] != member and generation < assignee[0]:
            violation("generation-went-backwards", tp,
                      f"group {group!r} {tp[1]}:{tp[2]}: member {member!r}'s commit at member epoch {generation} "
                      f"was acknowledged ({op.describe()}), but member {assignee[1]!r} had been assigned the "
                      f"partition at member epoch {assignee[0]} before it was invoked ({assignee[2].describe()})",
                      [assignee[2], op])
        if key not in highest or generation > highest[key][0]:
            highest[key] = (generation, op)
        if consumer and op.f == "assign":
            for t, p in _value(op).get("partitions") or []:
                if (group, t, p) not in owner or generation > owner[(group, t, p)][0]:
                    owner[(group, t, p)] = (generation, member, op)


def rebalances(history: History) -> dict[str, list[tuple[int, Operation]]]:
    """Per group, each generation in the order first acknowledged, with the assignment that showed it."""
    out: dict[str, list[tuple[int, Operation]]] = {}
    seen: dict[str, set[int]] = {}
    for op in sorted((o for o in history.operations if o.f == "assign" and o.type == "ok"),
                     key=lambda o: o.complete.line):
        value = _value(op)
        group, generation = _str(value, "group", op), _int(value, "generation", op)
        if generation not in seen.setdefault(group, set()):
            seen[group].add(generation)
            out.setdefault(group, []).append((generation, op))
    return out


def rebalance_causes(history: History) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per group, the times of membership changes (the workload's, consumers' first joins, consumer faults
    and their ends), and the allowance (session plus rebalance timeout, plus a margin) the workload declared
    for it."""
    causes: dict[str, list[float]] = {}
    allowance: dict[str, float] = {}
    for op in history.operations:
        if op.f == "join" and isinstance(op.invoke.value.get("group"), str):
            causes.setdefault(op.invoke.value["group"], []).append(op.invoke.time)
            continue
        if op.process != "workload":
            continue
        group = op.invoke.value.get("group")
        if isinstance(group, str):
            causes.setdefault(group, []).append(op.invoke.time)
            session, rebalance = op.invoke.value.get("session_timeout_ms"), op.invoke.value.get("rebalance_timeout_ms")
            if isinstance(session, int) and isinstance(rebalance, int):
                allowance[group] = (session + rebalance) / 1000.0 + 5.0
    for ev in history.faults:
        fault = ev.f if ev.f != "heal" else ev.value.get("fault")
        group = ev.value.get("group")
        if fault in CONSUMER_FAULTS and isinstance(group, str):
            causes.setdefault(group, []).append(ev.time)
    return causes, allowance


COORDINATOR_CHANGES = ("member-added", "member-removed")


def _consumers_lost(history: History) -> dict[str, list[float]]:
    """Per consumer (its process, the client id its member carries), when the run lost it: a consumer fault
    of the nemesis (killed, paused) or the workload stopping it."""
    out: dict[str, list[float]] = {}
    for ev in history.faults:
        consumer = ev.value.get("consumer")
        if ev.f in CONSUMER_FAULTS and isinstance(consumer, str):
            out.setdefault(consumer, []).append(ev.time)
    for op in history.operations:
        consumer = op.invoke.value.get("consumer")
        if op.process == "workload" and op.f == "stop-consumer" and isinstance(consumer, str):
            out.setdefault(consumer, []).append(op.invoke.time)
    return out


def coordinator_changes(history: History) -> dict[str, list[float]]:
    """Per group, the times of the membership changes its coordinator recorded in its log (the ``coordinator``
    process's acknowledged ``member-added`` / ``member-removed``, which the audit reads back at the end of a
    run: a lower bound, since compaction drops old records) that something the run did explains: a member
    removed whose consumer the run had lost (killed, paused, stopped) before, and a member added for a
    consumer that was not a member yet, or whose last removal was such an explained one. A failover that
    lost members, which then rejoin under new ids (removed and added again with their consumers alive), or
    that expired live members, explains nothing: its rebalance stays a violation."""
    lost = _consumers_lost(history)
    # Whose member is it: the consumer (process) whose assignments carried the member id; a record's client
    # id otherwise (a KIP-848 member's records carry none). Unknown (never assigned): taken as explained.
    consumer_of = {(_str(_value(op), "group", op), _value(op).get("member")): op.process
                   for op in history.operations if op.f == "assign" and op.type == "ok"}
    ops = sorted((op for op in history.operations
                  if op.process == "coordinator" and op.f in COORDINATOR_CHANGES and op.type == "ok"),
                 key=lambda op: op.invoke.time)
    out: dict[str, list[float]] = {}
    removed_for_cause: dict[tuple[str, str], bool] = {}  # (group, client) -> how its last removal went
    for op in ops:
        value = _value(op)
        group, t = _str(value, "group", op), op.invoke.time
        client = consumer_of.get((group, value.get("member"))) or value.get("client_id") or None
        if client is None:
            explained = True
        elif op.f == "member-removed":
            explained = any(when <= t + SLACK_S for when in lost.get(client, ()))
            removed_for_cause[(group, client)] = explained
        else:
            explained = removed_for_cause.get((group, client), True)
            removed_for_cause.pop((group, client), None)
        if explained:
            out.setdefault(group, []).append(t)
    return {g: sorted(ts) for g, ts in out.items()}


def _owned(history: History) -> dict[tuple[str, int], set]:
    """Per (group, generation), the partitions its members' acknowledged assignments hold."""
    out: dict[tuple[str, int], set] = {}
    for op in history.operations:
        if op.f == "assign" and op.type == "ok":
            value = _value(op)
            key = (_str(value, "group", op), _int(value, "generation", op))
            out.setdefault(key, set()).update(tuple(tp) for tp in value.get("partitions") or [])
    return out


def _refusals(history: History) -> dict[str, list[float]]:
    """Per group, when its commits were refused for their generation (``fail``): the group was rebalancing."""
    out: dict[str, list[float]] = {}
    for op in history.operations:
        if op.f == "commit" and op.type == "fail" and isinstance(op.invoke.value.get("group"), str):
            out.setdefault(op.invoke.value["group"], []).append(op.complete.time)
    return {g: sorted(ts) for g, ts in out.items()}


def rebalance_on_failover(history: History, violation) -> None:
    """A rebalance counts from when the group was first seen rebalancing (a commit refused for its
    generation after the previous generation was acknowledged) to its new generation: a rebalance that a
    consumer's loss started may finish late when coordinator failovers interrupt it."""
    causes, allowance = rebalance_causes(history)
    decided = coordinator_changes(history)
    refused = _refusals(history)
    owned = _owned(history)
    protocol = protocols(history)
    for group, gens in rebalances(history).items():
        window = allowance.get(group, DEFAULT_ALLOWANCE_S)
        universe: set = set()
        for (prev_generation, previous), (generation, op) in zip(gens, gens[1:], strict=False):
            universe |= owned.get((group, prev_generation), set())
            if protocol.get(group) != "consumer" and owned.get((group, prev_generation), set()) < universe:
                # The previous generation left partitions unowned: a cooperative rebalance's second round
                # (KIP-429), caused by whatever caused the first, however long failovers delayed it.
                continue
            seen = op.complete.time
            began = min([t for t in refused.get(group, []) if previous.complete.time <= t <= seen] or [seen])
            # Any membership change since the previous generation was acknowledged is a cause: it forces a
            # new generation however long coordinator failovers (which lose a rebalance in flight, as in
            # Kafka) delay it.
            since = min(began - window, previous.complete.time)
            if any(since <= t <= seen + SLACK_S for t in causes.get(group, [])):
                continue
            # A change the coordinator decided and logged (a session expiry: no client saw it) since the
            # previous generation was acknowledged is a cause however long ago its cause was: failovers
            # restart the members' sessions, so a dead member may be expired long after it died.
            if any(previous.complete.time <= t <= seen + SLACK_S for t in decided.get(group, [])):
                continue
            faults = [f"{ev.f} at {ev.time:.3f} s" for ev in history.faults if seen - window <= ev.time <= seen]
            violation("rebalance-on-failover", (group, "", -1),
                      f"group {group!r} reached {_generation_word(protocol.get(group, 'classic'))} {generation} "
                      f"({op.describe()}) with no membership change in the {window:g} s before it, nor one its "
                      f"coordinator recorded since {_generation_word(protocol.get(group, 'classic'))} "
                      f"{prev_generation} was acknowledged at {previous.complete.time:.3f} s; faults then: "
                      f"{', '.join(faults) or 'none'}", [op])


def _run(run: list | None) -> str:
    return "nothing" if run is None else f"epoch {run[0]} offsets {run[1]}..{run[2] - 1} (digest {run[3][:12]})"


def audit(history: History, violation) -> None:
    replicas: dict[int, list[tuple[str, list, Operation]]] = {}
    for op in history.operations:
        if op.type != "ok" or op.f not in ("digest", "replica-log"):
            continue
        value = _value(op)
        partition = _int(value, "partition", op)
        if op.f == "digest":
            if value.get("live") != value.get("replay"):
                violation("replay-differs-from-live", ("", "__consumer_offsets", partition),
                          f"partition {partition}: the leader's live state digest {value.get('live')} differs from "
                          f"its log's replay {value.get('replay')} ({op.describe()})", [op])
            continue
        runs = value.get("runs")
        if not isinstance(runs, list) or not all(isinstance(r, list) and len(r) == 4 for r in runs):
            raise HistoryError(f"line {op.invoke.line}: a replica-log needs runs [[epoch, first, next, digest], ...]")
        node = _str(value, "node", op)
        epochs = [r[0] for r in runs]
        if any(a >= b for a, b in zip(epochs, epochs[1:], strict=False)):
            violation("single-writer-per-epoch", ("", "__consumer_offsets", partition),
                      f"partition {partition}: replica {node}'s batches go back to an older leader epoch "
                      f"(epochs in log order: {epochs}) ({op.describe()})", [op])
        replicas.setdefault(partition, []).append((node, runs, op))
    # In-sync replicas audited below one offset must hold the same batches under the same epochs.
    for partition, found in replicas.items():
        node0, runs0, op0 = found[0]
        for node, runs, op in found[1:]:
            if runs == runs0:
                continue
            i = next((i for i, (a, b) in enumerate(zip(runs0, runs, strict=False)) if a != b), min(len(runs0), len(runs)))
            mine = runs0[i] if i < len(runs0) else None
            theirs = runs[i] if i < len(runs) else None
            violation("single-writer-per-epoch", ("", "__consumer_offsets", partition),
                      f"partition {partition}: in-sync replicas {node0} and {node} differ below their common log end "
                      f"from run {i}: {node0} holds {_run(mine)}, {node} holds {_run(theirs)}", [op0, op])
