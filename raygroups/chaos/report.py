"""A chaos run's report (``report.json``) and its pictures (``timeline.png``, ``failover-cdf.png``, and
``timeline-zoom.png`` when there are many faults), all derived from the history (and the nemesis's notes on
each failover).

Availability comes from the availability probes (``workload.AvailabilityProbe``: per coordinator partition,
a client committing to a scratch group of its own at a fixed rate), so that it measures the coordinator and
not the consumers: a partition is unavailable from the invocation of a probe commit that failed, timed out
or took over a second until a probe commit invoked since then succeeds, whatever the cause (a follower's
loss stalls writes too). The consumers' own gaps (the same rule over their commits: a rebalance or a
paused consumer shows there too) are kept beside it, named as such.

Failover time is Kafka's user-visible one, as the probe sees it: from the kill (or pause) to the first
probe commit on the partition that only the new leader can have acknowledged (invoked once its shard was
started), broken down into detection (the controller's first reaction), election (to the new leader's
start), load (the new shard's replay) and client rediscovery (the rest); a failover whose partition was
disrupted again before that first commit (a leader flap's next kill) is counted as interrupted, with no time
(the commit was the later leader's). Beside it, per failover, the time
to the consumers' first commit there (``consumers_s``), which adds whatever rebalances the consumers were
in. Faults that take every replica of a partition down at once (``RECOVERY_FAULTS``) are no failover: their
rows are reported apart, as recoveries. Rebalances are the generations each group reached after its first.
Records reprocessed are a lower bound: per resume, how far below the highest offset already
committed-or-attempted on that partition the consumer resumed.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from raygroups.chaos.checker import CheckResult
from raygroups.chaos.compaction import compaction_summary
from raygroups.chaos.history import History, Operation, is_injection
from raygroups.chaos.membership_checks import rebalances
from raygroups.chaos.workload import AVAILABILITY_PROCESS
from raygroups.coordinator.partitioning import partition_for
from raygroups.stats import percentile

FAILOVER_HORIZON_S = 120.0
SLOW_S = 1.0  # a commit slower than this counts as its partition being unavailable
# Faults after which no replica of a partition survived to take over: a restart from the disks, not a failover.
RECOVERY_FAULTS = frozenset({"full-restart"})
STEPS = ("detection_s", "election_s", "load_s", "rediscovery_s")


def _pct(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else round(value, 3)


def _summary(values: list[float]) -> dict:
    return {"count": len(values), "p50": _pct(values, 0.5), "p99": _pct(values, 0.99),
            "max": round(max(values), 3) if values else None}


def _commits(history: History) -> list:
    return [op for op in history.operations if op.f == "commit"]


def is_probe(op: Operation) -> bool:
    """An availability probe's operation."""
    return op.process.startswith(AVAILABILITY_PROCESS)


def is_consumer(op: Operation) -> bool:
    """A consumer's operation (its values name the member)."""
    return "member" in op.invoke.value


def _ok_by_partition(history: History, num_partitions: int, keep: Callable[[Operation], bool]) -> dict[int, list]:
    out: dict[int, list] = defaultdict(list)
    for op in _commits(history):
        if op.type == "ok" and keep(op):
            out[partition_for(op.invoke.value["group"], num_partitions)].append(op)
    return out


def _first_served(ops: list, since: float, fault_time: float) -> float | None:
    """Seconds from the fault to the completion of the first of ``ops`` invoked at or after ``since``."""
    first = next((op for op in ops if op.invoke.time >= since), None)
    if first is None or first.complete.time - fault_time > FAILOVER_HORIZON_S:
        return None
    return round(first.complete.time - fault_time, 3)


def _next_disruptions(nemesis: Any) -> dict[tuple[int, int], Any]:
    """Per (index of a disruption, partition it took down), the next disruption of that partition."""
    by_partition: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for i, d in enumerate(nemesis.disruptions):
        for p in d.partitions:
            by_partition[p].append((d.time, i))
    out = {}
    for p, hits in by_partition.items():
        hits.sort()
        for (_, i), (_, j) in zip(hits, hits[1:], strict=False):
            out[(i, p)] = nemesis.disruptions[j]
    return out


def failovers(history: History, nemesis: Any, num_partitions: int) -> list[dict]:
    """One row per partition a disruption took down. A row whose first commit came only after the next
    disruption of its partition (the second kill of a leader flap, say, before a probe commit reached the
    first successor) is ``interrupted``: that commit was the later leader's, so the row has no time of its
    own (counting it would count the later failover twice); the outage stays in the availability figures."""
    probes = _ok_by_partition(history, num_partitions, is_probe)
    consumers = _ok_by_partition(history, num_partitions, is_consumer)
    following = _next_disruptions(nemesis)
    out = []
    for i, d in enumerate(nemesis.disruptions):
        for p in d.partitions:
            b = d.breakdown.get(p, {})
            # The first commit only the new incarnation can have acknowledged: invoked once it serves (a
            # killed node's processes may answer for a moment; a paused leader's followers are fenced).
            since = max(d.time, b.get("served_from", d.time))
            total = _first_served(probes.get(p, []), since, d.time)
            consumers_s = _first_served(consumers.get(p, []), since, d.time)
            nxt = following.get((i, p))
            interrupted = nxt is not None and total is not None and d.time + total > nxt.time
            if interrupted:
                total = None
            if nxt is not None and consumers_s is not None and d.time + consumers_s > nxt.time:
                consumers_s = None
            row = {"fault": d.fault, "time": round(d.time, 3), "partition": p, "total_s": total,
                   "consumers_s": consumers_s, **dict.fromkeys(STEPS)}
            if interrupted:
                row["interrupted_by"] = nxt.fault
            row.update({k: b.get(k) for k in ("detection_s", "election_s")})
            if b.get("load_s") is not None:
                row["load_s"] = round(b["load_s"], 3)
            known = [row[k] for k in ("detection_s", "election_s", "load_s") if row[k] is not None]
            if total is not None and known:
                row["rediscovery_s"] = round(max(0.0, total - sum(known)), 3)
            out.append(row)
    return out


def _unserved(rows: list[dict]) -> int:
    """Rows of a partition no probe commit was served on within ``FAILOVER_HORIZON_S``."""
    return sum(1 for r in rows if r["total_s"] is None and "interrupted_by" not in r)


def _failover_summary(rows: list[dict]) -> dict:
    """The times of ``rows``: in all, step by step, to the consumers' first commit, and per fault type."""
    by_fault: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_fault[r["fault"]].append(r)
    return {
        "total_s": _summary([r["total_s"] for r in rows if r["total_s"] is not None]),
        **{k: _summary([r[k] for r in rows if r[k] is not None]) for k in STEPS},
        "consumers_s": _summary([r["consumers_s"] for r in rows if r["consumers_s"] is not None]),
        "unserved": _unserved(rows),
        "interrupted": sum(1 for r in rows if "interrupted_by" in r),
        "by_fault": {f: {"total_s": _summary([r["total_s"] for r in rs if r["total_s"] is not None]),
                         "consumers_s": _summary([r["consumers_s"] for r in rs if r["consumers_s"] is not None]),
                         "unserved": _unserved(rs), "interrupted": sum(1 for r in rs if "interrupted_by" in r)}
                     for f, rs in sorted(by_fault.items())},
        "events": rows,
    }


def unavailable_windows(history: History, num_partitions: int, slow_s: float = SLOW_S,
                        keep: Callable[[Operation], bool] = is_probe) -> dict[int, list]:
    """Per coordinator partition, when the commits ``keep`` selects (the availability probes' by default)
    were not served: from the invocation of one that timed out, took longer than ``slow_s`` or (a probe's)
    failed, to the first one invoked since then that succeeded (merged). A consumer's commit refused for its
    generation was served."""
    by_partition: dict[int, list] = defaultdict(list)
    for op in _commits(history):
        if keep(op):
            by_partition[partition_for(op.invoke.value["group"], num_partitions)].append(op)
    end_of_run = max((ev.time for ev in history.events), default=0.0)
    out: dict[int, list] = {}
    for p, ops in by_partition.items():
        ops.sort(key=lambda o: o.invoke.time)
        oks = [o for o in ops if o.type == "ok"]
        invoked = [o.invoke.time for o in oks]
        # first_done[i]: the earliest completion among the successful commits invoked at or after oks[i]
        first_done = [0.0] * len(oks)
        earliest = end_of_run
        for i in range(len(oks) - 1, -1, -1):
            earliest = min(earliest, oks[i].complete.time)
            first_done[i] = earliest
        windows: list[list[float]] = []
        for op in ops:
            slow = op.type == "info" or (op.type == "fail" and is_probe(op)) \
                or (op.type == "ok" and op.complete.time - op.invoke.time > slow_s)
            if not slow:
                continue
            start = op.invoke.time
            i = bisect.bisect_left(invoked, start)
            end = first_done[i] if i < len(oks) else end_of_run
            if op.type == "ok":
                end = min(end, op.complete.time)
            if windows and start <= windows[-1][1]:
                windows[-1][1] = max(windows[-1][1], end)
            else:
                windows.append([start, end])
        if windows:
            out[p] = [[round(a, 3), round(b, 3)] for a, b in windows]
    return out


def reprocessed(history: History) -> int:
    """Records consumed again after a resume (a lower bound; see the module docstring)."""
    highest: dict[tuple, int] = {}
    total = 0
    for ev in history.events:
        if ev.f == "commit" and ev.type == "invoke":
            key = (ev.value["group"], ev.value["topic"], ev.value["partition"])
            highest[key] = max(highest.get(key, 0), ev.value["offset"])
        elif ev.f == "resume" and ev.type == "ok":
            key = (ev.value["group"], ev.value["topic"], ev.value["partition"])
            total += max(0, highest.get(key, 0) - max(ev.value["offset"], 0))
    return total


def build_report(history: History, result: CheckResult, nemesis: Any, options: Any, faults_start: float,
                 info: dict) -> dict:
    by_f: dict[str, Counter] = defaultdict(Counter)
    for op in history.operations:
        by_f[op.f][op.type] += 1
    # The workload's commits (consumers' and the scratch groups'): the probes' have their own figures.
    commits = [op for op in _commits(history) if op.type == "ok" and not is_probe(op)]
    latency = [op.complete.time - op.invoke.time for op in commits]
    rows = failovers(history, nemesis, info["coordinator_partitions"])
    windows = unavailable_windows(history, info["coordinator_partitions"])
    gaps = unavailable_windows(history, info["coordinator_partitions"], keep=is_consumer)
    gens = rebalances(history)
    last = max((ev.time for ev in history.events), default=0.0)
    probe_commits = [op for op in _commits(history) if is_probe(op)]
    probe_latency = [op.complete.time - op.invoke.time for op in probe_commits if op.type == "ok"]
    return {
        "ok": result.ok,
        "faults_injected": result.faults,
        "violations": [v.to_dict() for v in result.violations],
        "invariants": result.to_dict()["invariants"],
        "operations": {**result.operations, "by_operation": {f: dict(c) for f, c in sorted(by_f.items())}},
        "faults": dict(Counter(ev.f for ev in history.faults if is_injection(ev))),
        "faults_planned": info.pop("faults_planned", None),
        "faults_skipped": dict(nemesis.skipped),
        "nemesis_errors": list(getattr(nemesis, "errors", [])),
        "failover": _failover_summary([r for r in rows if r["fault"] not in RECOVERY_FAULTS]),
        "recovery": _failover_summary([r for r in rows if r["fault"] in RECOVERY_FAULTS]),
        "availability_probe": {"commits": dict(Counter(op.type for op in probe_commits)),
                               "interval_s": getattr(options, "availability_interval_s", None),
                               "latency_ms": {k: (None if v is None else round(v * 1000, 2))
                                              for k, v in _summary(probe_latency).items() if k != "count"}},
        "unavailability_s": {str(p): round(sum(b - a for a, b in w), 3) for p, w in sorted(windows.items())},
        "unavailable_windows": {str(p): w for p, w in sorted(windows.items())},
        "consumer_commit_gaps_s": {str(p): round(sum(b - a for a, b in w), 3) for p, w in sorted(gaps.items())},
        "consumer_commit_gap_windows": {str(p): w for p, w in sorted(gaps.items())},
        "rebalances": {g: max(0, len(v) - 1) for g, v in sorted(gens.items())},
        "records_reprocessed": reprocessed(history),
        "commits": {"ok": len(commits), "per_s": round(len(commits) / last, 1) if last else 0.0,
                    "latency_ms": {k: (None if v is None else round(v * 1000, 2))
                                   for k, v in _summary(latency).items() if k != "count"}},
        "duration_s": round(last, 3),
        "faults_started_at_s": round(faults_start, 3),
        **({"compaction": summary} if (summary := compaction_summary(history)) else {}),
        **info,
    }


MAX_BINS = 400
MAX_FAULT_LINES = 60
ZOOM_S = 120.0  # the zoomed timeline's window when a run has more faults than lines can show


def fault_colour(name: str) -> Any:
    """One colour per fault type, stable across runs (the catalogue's order on a 40-colour palette)."""
    import matplotlib

    from raygroups.chaos.faults import CATALOGUE

    palette = [*matplotlib.colormaps["tab20"].colors, *matplotlib.colormaps["tab20b"].colors]
    names = list(CATALOGUE)
    index = names.index(name) if name in names else len(names)
    return palette[index % len(palette)]


def plot_timeline(history: History, report: dict, path: str) -> None:
    """Commit throughput and latency over time with the faults marked (a colour per fault type), each
    coordinator partition's unavailability (the availability probe's) beside its consumers' commit gaps, and
    each group's generation (its steps are rebalances). With more faults than lines can show, a second
    picture (``timeline-zoom.png`` beside ``path``) draws the busiest ``ZOOM_S`` seconds at full detail."""
    import os

    end = max(report["duration_s"], 1.0)
    faults = [ev for ev in history.faults if ev.f != "heal"]
    _draw_timeline(history, report, path, 0.0, end)
    if len(faults) > MAX_FAULT_LINES:
        times = sorted(ev.time for ev in faults)
        # The window of ZOOM_S seconds holding the most faults (it starts at one of them).
        best = max(range(len(times)), key=lambda i: bisect.bisect_right(times, times[i] + ZOOM_S) - i)
        start = max(0.0, times[best] - 5.0)
        _draw_timeline(history, report, os.path.join(os.path.dirname(path), "timeline-zoom.png"), start,
                       min(end, start + ZOOM_S))


def _draw_timeline(history: History, report: dict, path: str, start: float, end: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span = max(end - start, 1.0)
    width = max(1, math.ceil(span / MAX_BINS))  # seconds per point: a long run stays readable
    bins = int(math.ceil(span / width))
    xs = [start + i * width for i in range(bins)]
    throughput = [0.0] * bins
    lat: list[list[float]] = [[] for _ in range(bins)]
    for op in _commits(history):
        if op.type == "ok" and is_consumer(op) and start <= op.complete.time < end:
            b = min(bins - 1, int((op.complete.time - start) // width))
            throughput[b] += 1 / width
            lat[b].append((op.complete.time - op.invoke.time) * 1000)
    fig, axes = plt.subplots(4, 1, figsize=(13, 10), sharex=True,
                             gridspec_kw={"height_ratios": [3, 2, 2, 2]})
    ax = axes[0]
    ax.plot(xs, throughput, color="tab:blue", lw=1)
    ax.set_ylabel("consumers' commits/s" if width == 1 else f"consumers' commits/s ({width} s means)")
    verdict = "OK: no invariant violated" if report["ok"] else f"{len(report['violations'])} VIOLATION(S)"
    fo = report["failover"]["total_s"]
    window = "" if start == 0 else f" (seconds {start:.0f}-{end:.0f})"
    ax.set_title(f"raygroups chaos run{window}: {report['faults_injected']} faults, {report['commits']['ok']} "
                 f"acknowledged commits, failover p50 {fo['p50']} s / p99 {fo['p99']} s -- {verdict}", fontsize=10)
    seen: set[str] = set()
    faults = [ev for ev in history.faults if ev.f != "heal" and start <= ev.time <= end]
    top = max(throughput, default=1.0) or 1.0
    for ev in faults:
        colour = fault_colour(ev.f)
        label = ev.f if ev.f not in seen else None
        if len(faults) <= MAX_FAULT_LINES:
            for a in axes[:3]:
                a.axvline(ev.time, color=colour, lw=0.9, alpha=0.7, label=label if a is ax else None)
        else:  # many faults: a tick each along the top, not lines over everything
            ax.plot([ev.time], [top * 1.08], marker="|", markersize=9, color=colour, label=label, lw=0)
        seen.add(ev.f)
    if seen:
        ax.set_ylim(0, top * 1.5)  # room for the fault ticks and the legend above the curve
        ax.legend(loc="upper left", bbox_to_anchor=(0, 0.93), fontsize=7, ncol=min(8, len(seen)))
    p50 = [percentile(v, 0.5) if v else float("nan") for v in lat]
    p99 = [percentile(v, 0.99) if v else float("nan") for v in lat]
    axes[1].plot(xs, p50, label="p50", lw=1)
    axes[1].plot(xs, p99, label="p99", lw=1)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("consumers' commit\nlatency (ms)")
    axes[1].legend(loc="upper left", fontsize=7)
    windows = {int(p): w for p, w in report["unavailable_windows"].items()}
    gaps = {int(p): w for p, w in report.get("consumer_commit_gap_windows", {}).items()}
    parts = sorted(set(windows) | set(gaps) | set(report.get("group_partitions", {}).values()))
    for p, w in windows.items():  # the upper half of each row: the probe's unavailability
        axes[2].broken_barh([(a, b - a) for a, b in w], (parts.index(p), 0.4), color="tab:red", alpha=0.8)
    for p, w in gaps.items():  # the lower half: the consumers' commit gaps
        axes[2].broken_barh([(a, b - a) for a, b in w], (parts.index(p) - 0.4, 0.4), color="tab:olive", alpha=0.6)
    axes[2].set_yticks(range(len(parts)), [f"p{p}" for p in parts])
    axes[2].set_ylabel(f"per partition: unavailable\n(red: probe, no commit within\n{SLOW_S:g} s; olive: "
                       "consumers' gaps)", fontsize=8)
    protocols = report.get("group_protocols", {})
    for group, gens in sorted(rebalances(history).items()):
        gx = [op.complete.time for _, op in gens]
        gy = [g for g, _ in gens]
        label = f"{group} ({protocols[group]})" if group in protocols else group
        axes[3].step(gx + [end], gy + gy[-1:], where="post", label=label, lw=1)
    axes[3].set_ylabel("generation\n(consumer protocol:\nnewest member epoch)" if "consumer" in protocols.values()
                       else "generation")
    axes[3].set_xlabel("seconds since the run started")
    if axes[3].get_legend_handles_labels()[0]:
        axes[3].legend(loc="upper left", fontsize=7)
    for a in axes:
        a.axvspan(max(start, report["faults_started_at_s"]), end, color="0.9", zorder=-1)
        a.set_xlim(start, end)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_failover_cdf(report: dict, path: str) -> None:
    """Per fault type, the distribution of failover times (kill -> first probe commit the new leader
    served), the recoveries' beside them, and the consumers' first commits of all failovers dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    rows = report["failover"]["events"] + report["recovery"]["events"]
    by_fault: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["total_s"] is not None:
            by_fault[r["fault"]].append(r["total_s"])
    for fault, values in sorted(by_fault.items()):
        values.sort()
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, ys, where="post", color=fault_colour(fault), lw=1.5,
                label=f"{fault} (n={len(values)}, p99 {_pct(values, 0.99)} s)")
    consumers = sorted(r["consumers_s"] for r in report["failover"]["events"] if r["consumers_s"] is not None)
    if consumers:
        ax.step(consumers, [(i + 1) / len(consumers) for i in range(len(consumers))], where="post", color="0.4",
                ls="--", lw=1, label=f"every failover: consumers' first commit (n={len(consumers)})")
    ax.set_xscale("log")
    ax.set_xlabel("seconds from the fault to the first commit served by the new leader")
    ax.set_ylabel("fraction of failovers")
    fo = report["failover"]["total_s"]
    ax.set_title(f"failover time per fault type: p50 {fo['p50']} s, p99 {fo['p99']} s over {fo['count']} "
                 "failovers", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
