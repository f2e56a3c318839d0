"""``raygroups compact``: run the Spark compaction job on a deployment, or end to end on a local one."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import time
from typing import Any

import click

from raygroups.cli.common import ERRORS, ExitCode, fail, init_ray, main
from raygroups.deployment.cluster import DEFAULT_NAMESPACE

LOCAL_PARTITIONS = 4
LOCAL_TOPIC_PARTITIONS = 8
LOCAL_GROUPS = 40
LOCAL_ROUNDS = 30
LOCAL_CONFIG = {"offsets.topic.segment.bytes": 16 * 1024, "group.initial.rebalance.delay.ms": 0}
MIN_CLEANABLE_DIRTY_RATIO = 0.5  # Kafka's min.cleanable.dirty.ratio default
MIN_EVERY_S, MAX_EVERY_S = 1.0, 7 * 24 * 3600.0
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class SparkJobError(RuntimeError):
    """The Spark job itself failed (an executor error reaches the driver as a Java exception)."""


def _spark_errors():
    """Spark's own exception types, so that a failed job prints one sentence instead of a JVM trace."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return ()
    return (Py4JError, PySparkException)


def _one_sentence(e: BaseException) -> SparkJobError:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    cause = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1] if lines else "")
    return SparkJobError(f"the Spark job failed: {cause[:300]} (run with --verbose for Spark's log)")


def _parse_partitions(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(p) for p in value.split(",") if p.strip() != ""]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of partition numbers",
                                 param_hint="--partitions") from None


def parse_every(value: str | None, option: str = "--every") -> float | None:
    """``--every`` (or ``option``): a duration such as ``90s``, ``10m``, ``1h`` (a bare number is seconds)."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", value)
    if not m:
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 30s, 10m, 1h)", param_hint=option)
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not MIN_EVERY_S <= seconds <= MAX_EVERY_S:
        raise click.BadParameter(f"{value!r} must be between {MIN_EVERY_S:g} s and {MAX_EVERY_S / 86400:g} days",
                                 param_hint=option)
    return seconds


@main.command()
@click.option("--address", default="auto", show_default=True, help="The Ray cluster of the deployment.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Ray namespace of the deployment.")
@click.option("--partitions", "partition_list", default=None, metavar="0,3",
              help="The __consumer_offsets partitions to compact (default: all).")
@click.option("--storage-uri", default=None,
              help="Segment store (a directory, or a pyarrow.fs URI such as s3://bucket/prefix); default: "
                   "<data dir>/segment-store.")
@click.option("--local", is_flag=True,
              help="Start the embedded default, fill it with synthetic commits, compact it, verify every "
                   "committed offset, and stop it.")
@click.option("--every", default=None, metavar="DURATION",
              help="Watch mode: a round every DURATION (e.g. 10m), one Spark session kept alive; each round "
                   "compacts only the partitions whose dirty ratio is at least --min-dirty-ratio.")
@click.option("--min-dirty-ratio", default=MIN_CLEANABLE_DIRTY_RATIO, show_default=True,
              type=click.FloatRange(0.0, 1.0),
              help="Kafka's min.cleanable.dirty.ratio: bytes of closed segments not compacted yet over all closed "
                   "bytes (watch mode only; a manual run compacts every partition).")
@click.option("--rounds", default=None, type=click.IntRange(1), help="Watch mode: stop after this many rounds.")
@click.option("--round-timeout", default="30m", show_default=True, metavar="DURATION",
              help="Watch mode: a round still running after this long has its Spark jobs cancelled and fails (a "
                   "job can wait for ever on executors lost with their node); the next round starts a new session "
                   "if this one lost its executors. A round still running a minute after that is stuck where no "
                   "cancel reaches (a Spark session that never starts): the process exits with code 1, for its "
                   "supervisor (systemd's Restart=always) to start it again.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON (one line per round), and the progress as JSON lines on stderr "
                   '({"step": "upload|compact|swap", "done": N, "total": M}; "spark" while its session starts; '
                   'the first swap line names the partitions about to be swapped: "proved": [...]).')
@click.option("--verbose", is_flag=True, help="Show Spark's and Ray's console output.")
def compact(address: str, namespace: str, partition_list: str | None, storage_uri: str | None, local: bool,
            every: str | None, min_dirty_ratio: float, rounds: int | None, round_timeout: str, as_json: bool,
            verbose: bool) -> None:
    """Compact the offsets logs with a Spark job on Ray (raydp); exit 0 only if every partition is ok."""
    from raygroups.compaction.spark_session import JavaMissingError, java_problem

    partitions = _parse_partitions(partition_list)
    every_s = parse_every(every)
    round_timeout_s = parse_every(round_timeout, "--round-timeout")
    if every_s is not None and local:
        raise click.UsageError("--every watches a deployment; --local is a one-off demonstration")
    if rounds is not None and every_s is None:
        raise click.UsageError("--rounds needs --every")
    problem = java_problem()
    if problem:
        fail(JavaMissingError(problem))
    if local:
        code = _compact_local(partitions, storage_uri, as_json, verbose)
    else:
        code = _compact_deployment(address, namespace, partitions, storage_uri, as_json, verbose,
                                   (every_s, min_dirty_ratio, rounds, round_timeout_s))
    sys.exit(code)


def _compact_deployment(address, namespace, partitions, storage_uri, as_json, verbose, watch) -> int:
    from raygroups.compaction.spark_session import stop_spark_session
    from raygroups.deployment.start import connect

    every_s, min_dirty_ratio, rounds, round_timeout_s = watch
    try:
        init_ray(address)
        cluster = connect(address, namespace)
        if every_s is not None:
            return watch_rounds(cluster, partitions, storage_uri, as_json, verbose, every_s, min_dirty_ratio, rounds,
                                round_timeout_s)
        report = _run_with_progress(cluster, partitions, storage_uri, as_json, verbose)
    except ERRORS as e:
        fail(e)
    except _spark_errors() as e:
        fail(_one_sentence(e))
    finally:
        stop_spark_session()
    _show(report, as_json)
    return 0 if report.ok else 1


# A round still running this long after its --round-timeout cancelled its Spark jobs waits where no cancel
# reaches: raydp's session start waiting for executors Ray cannot place, a Ray or Py4J call with no deadline.
# Found by the hour-long chaos run: a watch process silent for 45 minutes. A thread cannot interrupt those
# waits, so the process gives up, as a watchdog would, and its supervisor starts it again.
STUCK_GRACE_S = 60.0
_exit = os._exit  # (a test replaces it)


def _give_up(round_no: int, stuck_s: float, as_json: bool) -> None:
    """Called on a timer thread when round ``round_no`` has run ``stuck_s``: one sentence, then exit 1."""
    why = (f"round {round_no} still running {stuck_s:g} s after it started, {STUCK_GRACE_S:g} s past --round-timeout "
           f"and the cancel of its Spark jobs: it waits where no cancel reaches; exiting for the supervisor "
           f"to start the watch again")
    if as_json:
        click.echo(json.dumps({"ok": False, "error": why}))
    click.echo(f"raygroups compact: {why}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    _exit(ExitCode.ERROR)


def watch_rounds(cluster: Any, partitions, storage_uri, as_json: bool, verbose: bool, every_s: float,
                 min_dirty_ratio: float, rounds: int | None, round_timeout_s: float | None = None) -> int:
    """The watch mode: a round every ``every_s`` (from the start of the previous one) until ``rounds`` or
    Ctrl-C; 0 if the last round was ok. Each round's report is shown (one JSON line with ``--json``). A round
    that fails (the head restarting under it, a Spark job error, its Spark jobs cancelled after
    ``round_timeout_s``) is reported in one sentence and the watch goes on: the next round finds out whether
    its Spark session still answers with an executor and starts a new one if not
    (``compaction.spark_session``)."""
    import ray
    from rich.console import Console

    from raygroups.compaction.spark_session import cancel_jobs

    console = Console(stderr=True, quiet=as_json)
    console.print(f"compacting every {every_s:g} s the partitions whose dirty ratio is at least "
                  f"{min_dirty_ratio:g} (min.cleanable.dirty.ratio); Ctrl-C stops")
    done, ok = 0, True
    try:
        while True:
            started = time.monotonic()
            timer = stuck = None
            if round_timeout_s is not None:
                timer = threading.Timer(round_timeout_s, cancel_jobs)
                stuck_s = round_timeout_s + STUCK_GRACE_S
                stuck = threading.Timer(stuck_s, _give_up, args=(done + 1, stuck_s, as_json))
                for t in (timer, stuck):
                    t.daemon = True
                    t.start()
            try:
                report = _run_with_progress(cluster, partitions, storage_uri, as_json, verbose,
                                            min_dirty_ratio=min_dirty_ratio,
                                            deadline=None if timer is None else started + round_timeout_s)
            except (*ERRORS, *_spark_errors(), ray.exceptions.RayError) as e:
                why = _one_sentence(e) if isinstance(e, _spark_errors()) else f"{type(e).__name__}: {e}"
                if round_timeout_s is not None and time.monotonic() - started >= round_timeout_s \
                        and not isinstance(e, TimeoutError):
                    why = f"cut short after {round_timeout_s:g} s (--round-timeout): {why}"
                console.print(f"round {done + 1} failed: {str(why).splitlines()[0][:300]}", markup=False)
                if as_json:
                    click.echo(json.dumps({"ok": False, "error": str(why).splitlines()[0][:300]}))
                done, ok = done + 1, False
            else:
                _show(report, as_json)
                done, ok = done + 1, report.ok
            finally:
                for t in (timer, stuck):
                    if t is not None:
                        t.cancel()
            if rounds is not None and done >= rounds:
                break
            wait = max(0.0, every_s - (time.monotonic() - started))
            console.print(f"round {done} {'ok' if ok else 'not ok'}; next round in {wait:.0f} s")
            time.sleep(wait)
    except KeyboardInterrupt:
        console.print(f"stopped after {done} round(s)")
    return 0 if ok else 1


def _compact_local(partitions, storage_uri, as_json, verbose) -> int:
    from rich.console import Console

    from raygroups.deployment.start import start_local

    console = Console(stderr=as_json, quiet=as_json)
    data_dir = tempfile.mkdtemp(prefix="raygroups-compact-")
    with console.status("starting a local deployment (Ray, 4 shard actors)"):
        cluster = start_local(num_partitions=LOCAL_PARTITIONS, data_dir=data_dir, config=LOCAL_CONFIG,
                              namespace="raygroups-compact-local")
    try:
        cluster.create_topic("events", LOCAL_TOPIC_PARTITIONS)
        client = cluster.client()
        _fill(client, console)
        before = _fetch_all(client)
        report = _run_with_progress(cluster, partitions, storage_uri, as_json, verbose)
        after = _fetch_all(client)
        snapshot = _snapshot_offsets(report.snapshot_path) if report.snapshot_path else None
    except ERRORS as e:
        _stop(cluster)
        fail(e)
    except _spark_errors() as e:
        _stop(cluster)
        fail(_one_sentence(e))
    _stop(cluster)
    verified = after == before and snapshot == {g: v for g, v in before.items() if v}
    _show(report, as_json, extra={"data_dir": data_dir, "verified": verified,
                                  "offsets": sum(len(v) for v in before.values())})
    if not as_json:
        offsets = sum(len(v) for v in before.values())
        if verified:
            console.print(f"[green]verified[/]: all {offsets} committed offsets of {len(before)} groups read back "
                          f"unchanged through the client after the swap, and the snapshot holds exactly them")
        else:
            console.print("[red]verification failed[/]: the offsets read back differ from those committed")
        console.print(f"data directory (kept): {data_dir}")
    return 0 if report.ok and verified else 1


def _stop(cluster: Any) -> None:
    """Spark first (its actors live in this Ray), then the deployment and the Ray it started."""
    from raygroups.compaction.spark_session import stop_spark_session

    stop_spark_session()
    cluster.shutdown()


def _fill(client: Any, console: Any) -> None:
    """Synthetic commits: every group commits all partitions of the topic, round after round."""
    from rich.progress import Progress

    total = LOCAL_GROUPS * LOCAL_ROUNDS
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("committing synthetic offsets", total=total)
        for r in range(LOCAL_ROUNDS):
            futures = [client.commit_offsets(
                group_id=f"pipeline-{g}",
                offsets={("events", p): (r * 100 + p, f"round {r}") for p in range(LOCAL_TOPIC_PARTITIONS)})
                for g in range(LOCAL_GROUPS)]
            for f in futures:
                f.result(60)
            bar.advance(task, LOCAL_GROUPS)


def _fetch_all(client: Any) -> dict:
    out = {}
    for g in range(LOCAL_GROUPS):
        response = client.fetch_offsets(group_id=f"pipeline-{g}").result(60)
        out[f"pipeline-{g}"] = {tp: po.offset for tp, po in response.offsets.items()}
    return out


def _snapshot_offsets(path: str) -> dict:
    from raygroups.compaction import read_snapshot

    out: dict = {}
    for row in read_snapshot(None, path).to_pylist():
        out.setdefault(row["group_id"], {})[(row["topic"], row["partition"])] = row["offset"]
    return out


def _run_with_progress(cluster: Any, partitions, storage_uri, as_json: bool, verbose: bool,
                       min_dirty_ratio: float | None = None, deadline: float | None = None):
    """One run with its progress shown; with ``deadline`` (on ``time.monotonic``), a step reached after it
    ends the run with ``TimeoutError`` (what it left is what a kill at that step leaves, which the next run
    takes up)."""
    from rich.console import Console
    from rich.progress import Progress

    from raygroups import compaction
    from raygroups.compaction.spark_session import spark_session

    def in_time() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the round ran past --round-timeout; its Spark jobs were cancelled")

    if as_json:  # a machine follows the progress: a JSON line per step, on stderr (stdout is the report's)
        def step(name: str, done: int, total: int, **detail: Any) -> None:
            click.echo(json.dumps({"step": name, "done": done, "total": total, **detail}), err=True)
            in_time()

        step("spark", 0, 1)
        spark = spark_session(verbose=verbose)
        step("spark", 1, 1)
        return compaction.run_with_progress(cluster, partitions=partitions, storage_uri=storage_uri, spark=spark,
                                            progress=step, min_dirty_ratio=min_dirty_ratio)
    console = Console(stderr=True)
    with console.status("starting Spark on Ray (raydp; this takes a while)"):
        spark = spark_session(verbose=verbose)
    with Progress(console=console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(step: str, done: int, total: int, **_detail: Any) -> None:
            if step not in tasks:
                tasks[step] = bar.add_task({"upload": "leaders upload closed segments",
                                            "compact": "Spark: decode, select, write, prove",
                                            "swap": "replicas swap compacted segments"}.get(step, step), total=total)
            bar.update(tasks[step], completed=done, total=total)
            in_time()

        return compaction.run_with_progress(cluster, partitions=partitions, storage_uri=storage_uri, spark=spark,
                                            progress=progress, min_dirty_ratio=min_dirty_ratio)


def _show(report: Any, as_json: bool, extra: dict | None = None) -> None:
    if as_json:
        click.echo(json.dumps({**report.to_dict(), **(extra or {})}, sort_keys=True, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("part.", "records", "bytes", "segs", "tombstones\ndropped", "proved", "swapped", "note",
                  title=f"compaction run {report.run_id}")
    for p in report.partitions:
        note = p.get("error", "") if not p["ok"] else \
            p.get("note", "" if p["segments_in"] else "no closed segment yet")
        replicas = p.get("replicas", {})
        swapped = "no"
        if p["swapped"]:
            done = sum(1 for v in replicas.values() if v == "swapped")
            swapped = "[green]yes[/]" if len(replicas) < 2 else \
                f"[{'green' if done == len(replicas) else 'yellow'}]{done}/{len(replicas)}[/]"
        proved = "[green]yes[/]" if p["equivalent"] else "[red]no[/]"
        if p.get("skipped"):
            proved = swapped = "–"
        table.add_row(
            str(p["partition"]), f"{p['records_in']}→{p['records_out']}", f"{p['bytes_in']}→{p['bytes_out']}",
            str(p["segments_in"]), str(p["tombstones_dropped"]), proved, swapped, note)
    console = Console()
    console.print(table)
    status = "[green]ok[/]" if report.ok else "[red]not ok[/]"
    console.print(f"{status} in {report.seconds:.1f} s; snapshot: {report.snapshot_path or '(none)'}")
