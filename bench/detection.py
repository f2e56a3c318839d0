"""Failure detection as a deployment setting: ``shard.session.timeout.ms``, speed against false failovers.

For each timeout, on a simulated 3-node cluster of 3 partitions:

1. **Load, no fault.** Two processes spin on the 2 cores while 32 clients commit to every partition for
   ``--load-seconds``; every leader change the controller makes meanwhile is a *false failover* (nothing
   failed). The latency of a no-op Ray call measured in the same window shows how loaded the machine was.
2. **A hung leader.** The shard process leading partition 0 is SIGSTOPped: time to the controller's
   failover (detection) and to the first commit the new leader serves.
3. **A lost node.** The raylet of partition 1's leader node is SIGKILLed: the same two times (here
   Ray's node health checks on simulated clusters race the shard's silence).

Writes ``bench/results/detection.json`` and ``bench/results/detection.png``, prints a table.
Run: ``.venv/bin/python bench/detection.py [--timeouts 500,1000,1500,2000,3000] [--load-seconds 45]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402
from raygroups.coordinator.errors import Errors  # noqa: E402

from bench.failover import _group_on  # noqa: E402
from raygroups.deployment.start import simulated_health_checks_text, start_local  # noqa: E402
from raygroups.stats import percentile  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "det"
PARTITIONS = 3
CONFIG = {"group.min.session.timeout.ms": 10, "request.timeout.ms": 120_000}
HOG = "while True:\n    pass\n"
# Where the figures go: the terminal, while this process's stdout/stderr (and Ray's own messages about the
# killed node, which its driver prints to sys.stdout) go to a log file.
OUT = sys.stdout


def say(text: str) -> None:
    print(text, file=OUT, flush=True)


@ray.remote(num_cpus=0)
def _noop() -> None:
    return None


def _leader_changes(cluster, since: int) -> list[dict]:
    return [e for e in cluster.controller_events()[since:] if e["event"] in ("failover", "shard-restart")]


def _commit_load(cluster, groups: list[str], stop: threading.Event, counts: dict, latencies_ms: list) -> None:
    """32 commits in flight over the partitions' groups until ``stop``; counts answers by error (the
    client retries retriable ones: a leader whose lease lapsed shows as latency)."""
    client = cluster.client()
    pending = []
    n = 0
    while not stop.is_set():
        while len(pending) < 32:
            n += 1
            group = groups[n % len(groups)]
            pending.append((time.perf_counter(), client.commit_offsets(group_id=group, offsets={(TOPIC, n % 8): (n, "")})))
        sent, done = pending.pop(0)
        try:
            error = next(iter(done.result(120).errors.values()))
            counts[error.name] = counts.get(error.name, 0) + 1
            latencies_ms.append((time.perf_counter() - sent) * 1000)
        except Exception as e:  # noqa: BLE001 - counted, the load goes on
            counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
    for _, f in pending:
        f.result(120)


def _percentile(values: list[float], q: float) -> float:
    return round(percentile(values, q), 2)


def _load_phase(cluster, groups: list[str], seconds: float) -> dict:
    since = len(cluster.controller_events())
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 2)]
    stop = threading.Event()
    counts: dict[str, int] = {}
    commit_ms: list[float] = []
    loader = threading.Thread(target=_commit_load, args=(cluster, groups, stop, counts, commit_ms), daemon=True)
    noop_ms = []
    try:
        loader.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t = time.perf_counter()
            ray.get(_noop.remote())
            noop_ms.append((time.perf_counter() - t) * 1000)
            time.sleep(0.05)
    finally:
        stop.set()
        for hog in hogs:
            hog.kill()
            hog.wait()
        loader.join(180)
    changes = _leader_changes(cluster, since)
    noop_ms.sort()
    commit_ms.sort()
    return {"seconds": seconds, "false_failovers": len(changes), "reasons": [e.get("reason") for e in changes],
            "commits_answered": counts,
            "commit_ms_p50": _percentile(commit_ms, 0.5), "commit_ms_p99": _percentile(commit_ms, 0.99),
            "commit_ms_max": round(commit_ms[-1], 2),
            "noop_task_ms_p50": _percentile(noop_ms, 0.5), "noop_task_ms_p99": _percentile(noop_ms, 0.99)}


def _first_commit_by_new_leader(cluster, partition: int, group: str, old_node: str, old_epoch: int) -> float:
    client = cluster.client()
    attempt = 0
    while True:
        attempt += 1
        r = client.commit_offsets(group_id=group, offsets={(TOPIC, 0): (attempt, "")}).result(120)
        state = cluster.partition_state(partition)
        if r.errors[(TOPIC, 0)] is Errors.NONE and state["leader_epoch"] > old_epoch and state["leader"] != old_node:
            return time.time()


def _fault(cluster, partition: int, group: str, kind: str) -> dict:
    client = cluster.client()
    assert client.commit_offsets(group_id=group, offsets={(TOPIC, 0): (0, "")}).result(60).errors[(TOPIC, 0)] is Errors.NONE
    state = cluster.partition_state(partition)
    status = cluster.shard_status()[partition]
    since = len(cluster.controller_events())
    t0 = time.time()
    if kind == "hung-leader":
        os.kill(status["pid"], signal.SIGSTOP)
    else:
        cluster.kill_node(state["leader"], graceful=False)
    try:
        t_ok = _first_commit_by_new_leader(cluster, partition, group, state["leader"], state["leader_epoch"])
    finally:
        if kind == "hung-leader":
            try:
                os.kill(status["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass  # the controller replaced (killed) it
    events = cluster.controller_events()[since:]
    failover = next((e for e in events if e["event"] == "failover" and e.get("partition") == partition), None)
    return {"fault": kind, "detection_s": None if failover is None else round(failover["t"] - t0, 3),
            "reason": None if failover is None else failover.get("reason"),
            "fault_to_first_commit_s": round(t_ok - t0, 3)}


def measure(timeout_ms: int, load_seconds: float) -> dict:
    cluster = start_local(num_partitions=PARTITIONS, num_nodes=3,
                          config={**CONFIG, "shard.session.timeout.ms": timeout_ms})
    try:
        cluster.create_topic(TOPIC, 8)
        groups = [_group_on(p, PARTITIONS, f"det{timeout_ms}") for p in range(PARTITIONS)]
        load = _load_phase(cluster, groups, load_seconds)
        say(f"timeout {timeout_ms} ms: {load['false_failovers']} false failovers in {load_seconds:.0f} s of load "
            f"(commit p99 {load['commit_ms_p99']} ms, max {load['commit_ms_max']} ms; no-op task p50 "
            f"{load['noop_task_ms_p50']} ms, p99 {load['noop_task_ms_p99']} ms)")
        faults = [_fault(cluster, 0, groups[0], "hung-leader"), _fault(cluster, 1, groups[1], "node-kill")]
        for f in faults:
            say(f"  {f['fault']}: detection {f['detection_s']} s, first commit after {f['fault_to_first_commit_s']} s")
        return {"shard_session_timeout_ms": timeout_ms, "load": load, "faults": faults}
    finally:
        cluster.shutdown()


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["shard_session_timeout_ms"] / 1000 for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, marker in (("hung-leader", "o"), ("node-kill", "s")):
        ys = [next(f["fault_to_first_commit_s"] for f in r["faults"] if f["fault"] == kind) for r in rows]
        a.plot(xs, ys, marker=marker, label=f"{kind}: fault -> first commit")
    a.plot(xs, xs, "k:", label="the timeout itself")
    a.set_xlabel("shard.session.timeout.ms (s)")
    a.set_ylabel("seconds")
    a.legend(fontsize=8)
    a.set_title("failover time")
    b.bar([str(int(x * 1000)) for x in xs], [r["load"]["false_failovers"] for r in rows])
    b.set_xlabel("shard.session.timeout.ms")
    b.set_ylabel(f"leader changes in {rows[0]['load']['seconds']:.0f} s, no fault")
    b.set_title("false failovers, both cores busy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeouts", default="500,1000,1500,2000,3000")
    parser.add_argument("--load-seconds", type=float, default=45.0)
    args = parser.parse_args()
    rows = [measure(int(t), args.load_seconds) for t in args.timeouts.split(",")]
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "ray": ray.__version__},
        "ray_node_health_checks": simulated_health_checks_text(),
        "runs": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "detection.json").write_text(json.dumps(result, indent=2))
    _plot(rows, RESULTS / "detection.png")
    say(f"{'timeout ms':>10} {'false':>6} {'hung: detect':>13} {'commit':>7} {'node: detect':>13} {'commit':>7}")
    for r in rows:
        hung, node = r["faults"]
        say(f"{r['shard_session_timeout_ms']:>10} {r['load']['false_failovers']:>6} {hung['detection_s']!s:>13} "
              f"{hung['fault_to_first_commit_s']:>7} {node['detection_s']!s:>13} {node['fault_to_first_commit_s']:>7}")
    say(f"results: {RESULTS / 'detection.json'}, picture: {RESULTS / 'detection.png'}")


if __name__ == "__main__":
    from raygroups.chaos.run import quiet_output

    RESULTS.mkdir(exist_ok=True)
    with quiet_output(str(RESULTS / "detection-ray-output.log"), restore=False) as terminal:
        OUT = terminal
        main()
