"""The head's loss survived: GCS fault tolerance with Ray's embedded RocksDB backend against an external
Redis (Debian's ``redis-server``, append-only file), on a simulated 3-node deployment under commits.

For each backend, the same run: commits flow from one thread per partition (a group on each); the head's
GCS and the controller are killed (``Cluster.restart_head``) and kept down ``--down`` seconds; the GCS
starts again from its storage and Ray restarts the controller. Measured: commits acknowledged while the
head was down and their rate against the rate before (measured in the same run), the longest gap between
two acknowledged commits across the outage, how long after the GCS's start the controller answered again,
and then a coordinator node killed: its partitions' kill -> first commit acknowledged after it.

Writes ``bench/results/head-restart.json``. Run: ``.venv/bin/python bench/head_restart.py`` (needs
``redis-server`` on PATH for the Redis run; ``--backends rocksdb`` without it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from raygroups import Errors, partition_for  # noqa: E402
from raygroups.deployment import start as start_module  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
REDIS_PORT = 6390
PARTITIONS = 4


class Commits:
    """One committing thread per partition; every acknowledged commit's wall time."""

    def __init__(self, cluster) -> None:
        self.client = cluster.client()
        self.groups = [next(g for g in (f"g{p}-{i}" for i in range(1000)) if partition_for(g, PARTITIONS) == p)
                       for p in range(PARTITIONS)]
        self.acked: list[float] = []
        self.acked_by: dict[str, list[float]] = {g: [] for g in self.groups}
        self.failed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(g,), daemon=True) for g in self.groups]

    def _loop(self, group: str) -> None:
        offset = 0
        while not self._stop.is_set():
            offset += 1
            try:
                r = self.client.commit_offsets(group_id=group, offsets={("t", 0): (offset, "")}).result(60)
                ok = r.errors[("t", 0)] is Errors.NONE
            except Exception:  # noqa: BLE001 - counted as a failed commit
                ok = False
            if ok:
                now = time.time()
                self.acked.append(now)
                self.acked_by[group].append(now)
            else:
                self.failed += 1
                self._stop.wait(0.05)

    def __enter__(self) -> Commits:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def between(self, a: float, b: float) -> int:
        return sum(1 for t in self.acked if a <= t < b)

    def longest_gap(self, a: float, b: float) -> float:
        times = sorted(t for t in self.acked if a <= t <= b)
        return max((y - x for x, y in zip(times, times[1:], strict=False)), default=b - a)


def _wait(condition, timeout_s: float = 120.0, interval_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except (ray.exceptions.RayError, TimeoutError, ValueError):
            pass
        time.sleep(interval_s)
    raise TimeoutError("condition not met")


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_backend(backend: str, down_s: float) -> dict:
    redis = None
    storage = tempfile.mkdtemp(prefix=f"raygroups-{backend}-")
    real_config = start_module.simulated_system_config
    if backend == "redis":
        redis = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--dir", storage,
                                  "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
                                 stdout=subprocess.DEVNULL)
        _wait(lambda: _accepts(REDIS_PORT), timeout_s=30)
        os.environ["RAY_REDIS_ADDRESS"] = f"127.0.0.1:{REDIS_PORT}"
        start_module.simulated_system_config = lambda gcs_dir: {
            k: v for k, v in real_config(gcs_dir).items() if k not in ("gcs_storage", "gcs_storage_path")}
    try:
        t0 = time.monotonic()
        cluster = start_module.start_local(num_partitions=PARTITIONS, num_nodes=3,
                                           config={"group.min.session.timeout.ms": 10})
        started_s = time.monotonic() - t0
        try:
            cluster.create_topic("t", 1)
            with Commits(cluster) as commits:
                _wait(lambda: len(commits.acked) > 200)
                before_from = time.time()
                time.sleep(5)
                killed = time.time()
                outage = cluster.restart_head(down_s)
                gcs_started = time.time()
                _wait(lambda: cluster.partition_state(0))
                controller_back = time.time()
                time.sleep(3)
                after = time.time()
                victim = cluster.partition_state(0)["leader"]
                moved = [p for p, n in cluster.partition_leaders().items() if n == victim]
                cluster.kill_node(victim, graceful=False)
                node_killed = time.time()
                _wait(lambda: all(cluster.partition_state(p)["leader"] not in (None, victim) for p in moved))
                time.sleep(3)
                recovered = {p: round(_first_after(commits.acked_by[commits.groups[p]], node_killed), 3)
                             for p in moved}
                rate_before = commits.between(before_from, killed) / (killed - before_from)
                rate_during = commits.between(killed, gcs_started) / (gcs_started - killed)
                return {
                    "backend": backend, "cluster_start_s": round(started_s, 1), "head_down_s": outage["down_s"],
                    "commits_acked_while_down": commits.between(killed, gcs_started),
                    "commit_rate_before_per_s": round(rate_before, 1),
                    "commit_rate_while_down_per_s": round(rate_during, 1),
                    "longest_commit_gap_s": round(commits.longest_gap(before_from, after), 3),
                    "gcs_start_to_controller_answering_s": round(controller_back - gcs_started, 3),
                    "failed_commits": commits.failed,
                    # Per moved partition: the kill -> the first commit after its longest silence since.
                    "node_loss_after": {"victim": victim, "kill_to_first_commit_s": recovered},
                }
        finally:
            cluster.shutdown()
    finally:
        start_module.simulated_system_config = real_config
        os.environ.pop("RAY_REDIS_ADDRESS", None)
        if redis is not None:
            redis.terminate()
            redis.wait(10)
        shutil.rmtree(storage, ignore_errors=True)


def _first_after(acked: list[float], t: float) -> float:
    """Seconds from ``t`` to the end of the longest silence of one group's acknowledged commits after it: the
    first commit its new leader acknowledged (the old leader's processes may still answer for a moment)."""
    times = sorted(x for x in acked if x >= t)
    gaps = [(y - x, y) for x, y in zip([t, *times], times, strict=False)]
    return max(gaps)[1] - t if gaps else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="rocksdb,redis")
    parser.add_argument("--down", type=float, default=10.0, help="seconds the head's GCS stays down")
    parser.add_argument("--out", default=str(RESULTS / "head-restart.json"))
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in ("rocksdb", "redis"):
            parser.error(f"unknown backend {b!r}: rocksdb or redis")
    if "redis" in backends and shutil.which("redis-server") is None:
        parser.error("the redis run needs redis-server on PATH (apt-get install redis-server), or --backends rocksdb")
    results = []
    for b in backends:
        print(f"{b}: a simulated 3-node deployment, the head down {args.down:g} s under commits ...", flush=True)
        results.append(run_backend(b, args.down))
        print(json.dumps(results[-1]), flush=True)
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                       "ray": ray.__version__, "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
           "partitions": PARTITIONS, "results": results}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
