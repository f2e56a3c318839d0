"""A chaos run's report (``report.json``) and its picture (``timeline.png``), both derived from the history
(and the nemesis's notes on each failover).

Failover time is Kafka's user-visible one: from the kill (or pause) to the first successful commit on the
partition that only the new leader can have acknowledged (invoked once its shard was started), broken down into detection (the controller's first reaction), election (to the
new leader's start), load (the new shard's replay) and client rediscovery (the rest). A coordinator
partition is unavailable from the invocation of a commit that timed out or took over a second until a
commit invoked since then succeeds, whatever the cause (a follower's loss stalls writes too). Rebalances are the generations each group reached after its
first. Records reprocessed are a lower bound: per resume, how far below the highest offset already
committed-or-attempted on that partition the consumer resumed.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from typing import Any

from raygroups.chaos.checker import CheckResult
from raygroups.chaos.history import History
from raygroups.chaos.membership_checks import rebalances
from raygroups.coordinator.partitioning import partition_for
from raygroups.stats import percentile

FAILOVER_HORIZON_S = 120.0
SLOW_S = 1.0  # a commit slower than this counts as its partition being unavailable


def _pct(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else round(value, 3)


def _summary(values: list[float]) -> dict:
    return {"count": len(values), "p50": _pct(values, 0.5), "p99": _pct(values, 0.99),
            "max": round(max(values), 3) if values else None}


def _commits(history: History) -> list:
    return [op for op in history.operations if op.f == "commit"]


def failovers(history: History, nemesis: Any, num_partitions: int) -> list[dict]:
    ok_commits: dict[int, list] = defaultdict(list)
    for op in _commits(history):
        if op.type == "ok":
            ok_commits[partition_for(op.invoke.value["group"], num_partitions)].append(op)
    out = []
    for d in nemesis.disruptions:
        for p in d.partitions:
            b = d.breakdown.get(p, {})
            # The first commit only the new incarnation can have acknowledged: invoked once it serves (a
            # killed node's processes may answer for a moment; a paused leader's followers are fenced).
            since = max(d.time, b.get("served_from", d.time))
            first = next((op for op in ok_commits.get(p, []) if op.invoke.time >= since), None)
            total = None if first is None or first.complete.time - d.time > FAILOVER_HORIZON_S \
                else round(first.complete.time - d.time, 3)
            row = {"fault": d.fault, "time": round(d.time, 3), "partition": p, "total_s": total,
                   "detection_s": None, "election_s": None, "load_s": None, "rediscovery_s": None}
            row.update({k: b.get(k) for k in ("detection_s", "election_s")})
            if b.get("load_s") is not None:
                row["load_s"] = round(b["load_s"], 3)
            known = [row[k] for k in ("detection_s", "election_s", "load_s") if row[k] is not None]
            if total is not None and known:
                row["rediscovery_s"] = round(max(0.0, total - sum(known)), 3)
            out.append(row)
    return out


def unavailable_windows(history: History, num_partitions: int, slow_s: float = SLOW_S) -> dict[int, list]:
    """Per coordinator partition, when it did not serve commits: from the invocation of a commit that
    timed out or took longer than ``slow_s`` to the first commit invoked since then that succeeded (merged).
    A commit refused for its generation was served."""
    by_partition: dict[int, list] = defaultdict(list)
    for op in _commits(history):
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
            slow = op.type == "info" or (op.type == "ok" and op.complete.time - op.invoke.time > slow_s)
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
    commits = [op for op in _commits(history) if op.type == "ok"]
    latency = [op.complete.time - op.invoke.time for op in commits]
    rows = failovers(history, nemesis, info["coordinator_partitions"])
    totals = [r["total_s"] for r in rows if r["total_s"] is not None]
    windows = unavailable_windows(history, info["coordinator_partitions"])
    gens = rebalances(history)
    last = max((ev.time for ev in history.events), default=0.0)
    return {
        "ok": result.ok,
        "faults_injected": result.faults,
        "violations": [v.to_dict() for v in result.violations],
        "invariants": result.to_dict()["invariants"],
        "operations": {**result.operations, "by_operation": {f: dict(c) for f, c in sorted(by_f.items())}},
        "faults": dict(Counter(ev.f for ev in history.faults if ev.f != "heal")),
        "faults_skipped": dict(nemesis.skipped),
        "nemesis_errors": list(getattr(nemesis, "errors", [])),
        "failover": {
            "total_s": _summary(totals),
            **{k: _summary([r[k] for r in rows if r[k] is not None])
               for k in ("detection_s", "election_s", "load_s", "rediscovery_s")},
            "unserved": sum(1 for r in rows if r["total_s"] is None),
            "events": rows,
        },
        "unavailability_s": {str(p): round(sum(b - a for a, b in w), 3) for p, w in sorted(windows.items())},
        "unavailable_windows": {str(p): w for p, w in sorted(windows.items())},
        "rebalances": {g: max(0, len(v) - 1) for g, v in sorted(gens.items())},
        "records_reprocessed": reprocessed(history),
        "commits": {"ok": len(commits), "per_s": round(len(commits) / last, 1) if last else 0.0,
                    "latency_ms": {k: (None if v is None else round(v * 1000, 2))
                                   for k, v in _summary(latency).items() if k != "count"}},
        "duration_s": round(last, 3),
        "faults_started_at_s": round(faults_start, 3),
        **info,
    }


MAX_BINS = 400
MAX_FAULT_LINES = 60
FAULT_COLOURS = {"shard": "tab:red", "leader": "tab:orange", "node": "tab:purple", "follower": "tab:pink",
                 "controller": "tab:brown", "consumer": "tab:green", "torn": "tab:gray", "bit": "tab:gray",
                 "full": "black"}


def plot_timeline(history: History, report: dict, path: str) -> None:
    """Commit throughput and latency over time with the faults marked, each coordinator partition's
    unavailable windows, and each group's generation (its steps are rebalances)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max(report["duration_s"], 1.0)
    width = max(1, math.ceil(end / MAX_BINS))  # seconds per point: a long run stays readable
    bins = int(math.ceil(end / width))
    xs = [i * width for i in range(bins)]
    throughput = [0.0] * bins
    lat: list[list[float]] = [[] for _ in range(bins)]
    for op in _commits(history):
        if op.type == "ok":
            b = min(bins - 1, int(op.complete.time // width))
            throughput[b] += 1 / width
            lat[b].append((op.complete.time - op.invoke.time) * 1000)
    fig, axes = plt.subplots(4, 1, figsize=(13, 10), sharex=True,
                             gridspec_kw={"height_ratios": [3, 2, 2, 2]})
    ax = axes[0]
    ax.plot(xs, throughput, color="tab:blue", lw=1)
    ax.set_ylabel("commits/s" if width == 1 else f"commits/s ({width} s means)")
    verdict = "OK: no invariant violated" if report["ok"] else f"{len(report['violations'])} VIOLATION(S)"
    ax.set_title(f"raygroups chaos run: {report['faults_injected']} faults, {report['commits']['ok']} acknowledged "
                 f"commits, failover p50 {report['failover']['total_s']['p50']} s / max "
                 f"{report['failover']['total_s']['max']} s -- {verdict}", fontsize=10)
    seen: set[str] = set()
    faults = [ev for ev in history.faults if ev.f != "heal"]
    top = max(throughput, default=1.0) or 1.0
    for ev in faults:
        colour = FAULT_COLOURS.get(ev.f.split("-")[0], "tab:red")
        label = ev.f if ev.f not in seen else None
        if len(faults) <= MAX_FAULT_LINES:
            for a in axes[:2]:
                a.axvline(ev.time, color=colour, lw=0.8, alpha=0.6, label=label if a is ax else None)
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
    axes[1].set_ylabel("commit latency (ms)")
    axes[1].legend(loc="upper left", fontsize=7)
    windows = {int(p): w for p, w in report["unavailable_windows"].items()}
    parts = sorted(set(windows) | set(report.get("group_partitions", {}).values()))
    for p, w in windows.items():
        axes[2].broken_barh([(a, b - a) for a, b in w], (parts.index(p) - 0.4, 0.8), color="tab:red", alpha=0.7)
    axes[2].set_yticks(range(len(parts)), [f"p{p}" for p in parts])
    axes[2].set_ylabel(f"unavailable (no commit\nserved within {SLOW_S:g} s)")
    protocols = report.get("group_protocols", {})
    for group, gens in sorted(rebalances(history).items()):
        xs = [op.complete.time for _, op in gens]
        ys = [g for g, _ in gens]
        label = f"{group} ({protocols[group]})" if group in protocols else group
        axes[3].step(xs + [end], ys + ys[-1:], where="post", label=label, lw=1)
    axes[3].set_ylabel("generation\n(consumer protocol:\nnewest member epoch)" if "consumer" in protocols.values()
                       else "generation")
    axes[3].set_xlabel("seconds since the run started")
    axes[3].legend(loc="upper left", fontsize=7)
    for a in axes:
        a.axvspan(report["faults_started_at_s"], end, color="0.9", zorder=-1)
        a.set_xlim(0, end)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
