"""``raygroups groups|offsets|status``: the operator's commands, after ``kafka-consumer-groups.sh``.

Each connects with ``--address`` (default ``auto``) and ``--namespace`` -- or, ``groups`` and ``offsets``, with
``--bootstrap-server`` to a Kafka listener of the deployment, through the Kafka protocol -- waits at most ``--timeout`` ms for
each request to the deployment, and prints a rich table or, with ``--json``, one JSON document. Exit codes
(``common.ExitCode``): 0 ok; 1 error (one sentence on stderr, nothing changed; or a partial failure, shown
per group or partition); 2 usage; 3 unreachable (no Ray at ``--address``, no deployment in the namespace, a
request not answered within ``--timeout``, the group's coordinator unavailable through the client's
retries); 4 unhealthy (``status`` only: a partition offline). With ``--json`` a failure is one JSON object on
stdout, ``{"error": "<sentence>", "exit_code": N}``, and a partial failure is the usual document with the
errors inside it. The rules live in ``raygroups.admin``; parsing (``--by-duration``, ``--from-file``) and
printing (tables, ``--export``'s CSV) live here.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from raygroups import admin
from raygroups.admin import AdminError
from raygroups.cli.common import ERRORS, ExitCode, fail, init_ray, main
from raygroups.deployment.cluster import DEFAULT_NAMESPACE

# Kafka's tool waits 5000 ms by default. Here a request may meet a partition being failed over, which the
# client retries until the new leader has loaded its log; so the default stays the wait these commands
# always had (admin.REQUEST_TIMEOUT_S), and a failover is not mistaken for an unreachable deployment.
DEFAULT_TIMEOUT_MS = int(admin.REQUEST_TIMEOUT_S * 1000)


def _ray_connection(f):
    f = click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT_MS,
                     show_default=True, metavar="MS",
                     help="Wait at most MS milliseconds for each request to the deployment; then exit 3 "
                          "(Kafka's --timeout).")(f)
    f = click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
                     help="Ray namespace of the deployment.")(f)
    return click.option("--address", default=None, metavar="ADDRESS",
                        help="The Ray cluster of the deployment (default: auto).")(f)


def _connection(f):
    """``_ray_connection``, or ``--bootstrap-server``: the Kafka protocol through a listener of the deployment
    (its gateway), with no Ray client connection (Kafka's ``--bootstrap-server``)."""
    f = click.option("--bootstrap-server", default=None, metavar="HOST:PORT[,HOST:PORT]",
                     help="Instead of Ray: a Kafka listener of the deployment (raygroups deploy --listeners, "
                          "or raygroups gateway), through the Kafka protocol.")(f)
    return _ray_connection(f)


class _Ray:
    """The way in through Ray: the deployment's own client, its topics, its partition leaders."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def client(self) -> Any:
        return self.cluster.client()

    def topics(self) -> dict[str, int]:
        return self.cluster.topics()

    def coordinator(self, group: str, timeout_s: float) -> dict:
        return _coordinator(self.cluster, group, timeout_s)


class _Kafka:
    """The way in through the Kafka protocol (``--bootstrap-server``): ``KafkaAdminClient`` to a listener; the
    coordinator is the broker FindCoordinator names (a node's listener), its partition unknown here."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        from raygroups.client.kafka_admin import KafkaAdminClient

        self._client = KafkaAdminClient(bootstrap, timeout_s=timeout_s, client_id="raygroups-cli")

    def client(self) -> Any:
        return self._client

    def topics(self) -> dict[str, int]:
        return self._client.topics()

    def coordinator(self, group: str, timeout_s: float) -> dict:
        try:
            found = self._client.find_coordinator(group)
        except (*ERRORS, AdminError):  # as through Ray: an unknown coordinator is shown "-", not an error
            found = {"error": "UNKNOWN"}
        leader = f"{found['host']}:{found['port']}" if found["error"] == "NONE" else None
        return {"partition": None, "leader": leader}


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True,
                        help='Print the result as JSON (a failure: {"error": ..., "exit_code": N}).')(f)


def _source_option(f):
    return click.option("--source", "source_spec", default=None, metavar="MODULE:ATTR",
                        help="A raygroups.Source (or a function returning one) that gives the topics' log-end "
                             "offsets: lag, --to-latest, --to-datetime, --by-duration.")(f)


def _connect(address: str | None, namespace: str):
    from raygroups.deployment.start import DeploymentNotFound, connect

    address = address or "auto"
    try:
        init_ray(address)
        return connect(address, namespace)
    except (ConnectionError, DeploymentNotFound) as e:
        raise admin.Unreachable(str(e)) from None


def _way_in(address: str | None, namespace: str, bootstrap_server: str | None, timeout_ms: int) -> _Ray | _Kafka:
    """Ray (``--address``/``--namespace``) or the Kafka protocol (``--bootstrap-server``), not both."""
    if bootstrap_server is None:
        return _Ray(_run(_connect, address, namespace))
    if address is not None or namespace != DEFAULT_NAMESPACE:
        raise click.UsageError("--bootstrap-server excludes --address and --namespace (a listener serves one "
                               "deployment)")
    from raygroups.client.kafka_wire import parse_bootstrap

    try:
        parse_bootstrap(bootstrap_server)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--bootstrap-server") from None
    return _run(_Kafka, bootstrap_server, timeout_ms / 1000)


def _run(fn, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; a failure is one sentence and its exit code: 3 when the deployment cannot be reached or
    did not answer in time, 1 otherwise."""
    import ray.exceptions

    try:
        return fn(*args, **kwargs)
    except admin.Unreachable as e:
        fail(e, ExitCode.UNREACHABLE)
    except AdminError as e:
        fail(e)
    except TimeoutError:  # a call to the controller (ray.get) not answered in time
        fail(RuntimeError("the deployment did not answer in time (see --timeout)"), ExitCode.UNREACHABLE)
    except ConnectionError as e:
        fail(e, ExitCode.UNREACHABLE)
    except ray.exceptions.RayError as e:  # an actor of the deployment died or restarts under the call
        fail(RuntimeError(f"the deployment did not answer ({type(e).__name__}); try again"), ExitCode.UNREACHABLE)
    except ERRORS as e:
        fail(e)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, sort_keys=True, default=str))


def _table(*columns: str):
    """Kafka's tool prints whole member ids and hosts: cells never end in an ellipsis (on a narrow terminal a
    long one folds onto the next line)."""
    from rich.table import Column, Table

    return Table(*(Column(c, overflow="fold") for c in columns), box=None, header_style="bold", pad_edge=False)


def _print(*items: Any) -> None:
    from rich.console import Console

    # Piped output (grep, awk, a file) gets one line per row, however wide.
    console = Console() if sys.stdout.isatty() else Console(width=100_000)
    for item in items:
        console.print(item)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _groups_or_all(group_ids: tuple[str, ...], all_groups: bool) -> None:
    # Kafka's ConsumerGroupCommandOptions: --describe and --delete take --group or --all-groups.
    if bool(group_ids) == all_groups:
        raise click.UsageError("name the groups (GROUP...) or give --all-groups, "
                               + ("not both" if all_groups else "got neither"))


# --- parsing and printing ------------------------------------------------------------------------------
_DURATION = re.compile(r"P(?:(?P<d>\d+)D)?(?P<t>T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)(?:[.,](?P<f>\d{0,9}))?S)?)?",
                       re.IGNORECASE)
# About a century: further back than any log's data, and far from the overflow of an epoch timestamp.
MAX_DURATION_MS = 36_500 * 86_400_000


def parse_duration_ms(text: str) -> int:
    """Kafka's ``--by-duration``: an ISO-8601 duration ``PnDTnHnMnS`` as ``java.time.Duration.parse`` reads it
    (days, hours, minutes, seconds with up to 9 decimals; P1DT2H, PT30M, PT0.5S), without a sign, since it
    says how far back from now; in milliseconds, at most ``MAX_DURATION_MS`` (P36500D)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.group(k) for k in "dhms") or (m.group("t") and not any(m.group(k) for k in "hms")):
        sign = " must not be negative (it is how far back from now), and" if "-" in text else ""
        raise AdminError(f"--by-duration {text!r}{sign} is not an ISO-8601 duration PnDTnHnMnS such as P1DT2H, "
                         f"PT30M or PT0.5S (days, hours, minutes, seconds)")
    d, h, mins, secs = (int(m.group(k) or 0) for k in "dhms")
    fraction_ms = int((m.group("f") or "").ljust(3, "0")[:3])
    ms = ((d * 24 + h) * 60 + mins) * 60_000 + secs * 1000 + fraction_ms
    if ms > MAX_DURATION_MS:
        raise AdminError(f"--by-duration {text!r} is {ms} ms; it must be at most P36500D ({MAX_DURATION_MS} ms)")
    return ms


MAX_PARTITION = 2**31 - 1  # Kafka's partition numbers are int32
MAX_OFFSET = 2**63 - 1  # and offsets int64


def parse_offsets_csv(text: str, group: str, name: str = "--from-file") -> tuple[tuple[str, int, int], ...]:
    """Kafka's reset plan (GroupOffsetsResetter.parseResetPlan): lines ``topic,partition,offset``, as
    ``--export`` writes, or ``group,topic,partition,offset`` of which the lines of ``group`` are kept; the
    first line's format is the file's. Blank lines are skipped. Every line is checked (``name`` and its line
    number in the message): the fields, the topic's length, partition 0..2^31-1, offset 0..2^63-1, a
    partition given twice. The ``(topic, partition, offset)`` of ``group``, sorted."""
    reader = csv.reader(io.StringIO(text))
    width = None
    rows: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) -> (offset, line)
    other_groups: set[str] = set()
    for fields in reader:
        fields = [f.strip() for f in fields]
        if not any(fields):
            continue
        where = f"{name} line {reader.line_num}"
        if len(fields) not in (3, 4):
            raise AdminError(f"{where}: expected topic,partition,offset (or group,topic,partition,offset), got "
                             f"{len(fields)} field(s)")
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise AdminError(f"{where}: {len(fields)} fields, but the first line has {width} (one format per file)")
        line_group = fields.pop(0) if width == 4 else group
        topic, partition, offset = fields
        if not topic or len(topic) > 249:
            raise AdminError(f"{where}: a topic name must be 1..249 characters, got {len(topic)}")
        tp = (topic, _csv_int(partition, "partition", MAX_PARTITION, where))
        new_offset = _csv_int(offset, "offset", MAX_OFFSET, where)
        if line_group != group:
            other_groups.add(line_group)
            continue
        if tp in rows:
            raise AdminError(f"{where}: {topic}:{tp[1]} is already on line {rows[tp][1]}")
        rows[tp] = (new_offset, reader.line_num)
    if width is None:
        raise AdminError(f"{name}: the file has no offsets (expected topic,partition,offset lines, as --export "
                         f"writes)")
    if not rows:
        raise AdminError(f"{name}: no offsets for group {group!r} (the file's lines are for "
                         f"{', '.join(repr(g) for g in sorted(other_groups))})")
    return tuple(sorted((t, p, offset) for (t, p), (offset, _) in rows.items()))


def _csv_int(text: str, what: str, limit: int, where: str) -> int:
    if not re.fullmatch(r"-?\d+", text):
        raise AdminError(f"{where}: {what} {text!r} is not a whole number (0..{limit})")
    value = int(text)
    if value < 0:
        raise AdminError(f"{where}: {what} {value} is negative; it must be 0..{limit}")
    if value > limit:
        raise AdminError(f"{where}: {what} {value} is larger than {limit}")
    return value


def read_offsets_file(path: str, group: str) -> tuple[tuple[str, int, int], ...]:
    name = f"--from-file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise AdminError(f"{name}: {(e.strerror or str(e)).lower()}") from None
    except UnicodeDecodeError:
        raise AdminError(f"{name}: the file is not UTF-8 text") from None
    return parse_offsets_csv(text, group, name)


def offsets_csv(plan: list[dict]) -> str:
    """``--export``: Kafka's CSV of one group's plan (ConsumerGroupCommand.exportOffsetsToCsv with
    CsvUtils.CsvRecordNoGroup), a line ``topic,partition,new_offset`` per partition and no header, which
    ``--from-file`` reads back. (Kafka writes ``group,topic,partition,offset`` when it resets several groups
    at once; ``offsets reset`` resets one.)"""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in plan:
        writer.writerow([row["topic"], row["partition"], row["new_offset"]])
    return out.getvalue()


def assignment_cell(partitions: list) -> str:
    """Kafka's ASSIGNMENT column of ``--members --verbose`` (ConsumerGroupCommand.printMembers): each topic
    with its partitions, ``orders(0,1), payments(2)``; ``-`` for none."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return ", ".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items())) or "-"


# --- groups -------------------------------------------------------------------------------------------
@main.group()
def groups() -> None:
    """List, describe and delete consumer groups."""


@groups.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(admin.GROUP_STATES, case_sensitive=False),
              help="Only groups in this state (repeatable).")
@_connection
@_json_option
def list_groups(states: tuple[str, ...], address: str | None, namespace: str, bootstrap_server: str | None,
                timeout_ms: int, as_json: bool) -> None:
    """Every group of the deployment, with its state."""
    canonical = [next(s for s in admin.GROUP_STATES if s.lower() == state.lower()) for state in states]
    way = _way_in(address, namespace, bootstrap_server, timeout_ms)
    rows = _run(admin.list_groups, way.client(), canonical, timeout_s=timeout_ms / 1000)
    if as_json:
        _echo_json(rows)
        return
    table = _table("GROUP", "STATE", "PROTOCOL-TYPE")
    for row in rows:
        table.add_row(row["group"], row["state"], row["protocol_type"] or "-")
    _print(table if rows else "no groups")


@groups.command("describe")
@click.argument("group_ids", metavar="[GROUP]...", nargs=-1)
@click.option("--all-groups", is_flag=True, help="Every group of the deployment (instead of GROUP...).")
@click.option("--members", "view", flag_value="members", help="The members and how many partitions each owns.")
@click.option("--offsets", "view", flag_value="offsets", default=True,
              help="Committed offsets, log-end offsets and lag per partition, with their owner (the default).")
@click.option("--state", "view", flag_value="state", help="State, coordinator, assignment strategy, member count.")
@click.option("--verbose", is_flag=True, help="With --members: each member's partitions (ASSIGNMENT).")
@_source_option
@_connection
@_json_option
def describe(group_ids: tuple[str, ...], all_groups: bool, view: str, verbose: bool, source_spec: str | None,
             address: str | None, namespace: str, bootstrap_server: str | None, timeout_ms: int,
             as_json: bool) -> None:
    """Describe groups: their offsets and lag (default), members, or state."""
    _groups_or_all(group_ids, all_groups)
    source = _run(admin.load_source, source_spec)
    way = _way_in(address, namespace, bootstrap_server, timeout_ms)
    described = _run(_describe_groups, way, group_ids, all_groups, source, timeout_ms / 1000)
    if as_json:
        _echo_json(described)
        return
    if not described:
        _print("no groups")
    for group in described:
        _print(*_describe_view(group, view, verbose))


def _describe_groups(way: _Ray | _Kafka, group_ids: tuple[str, ...], all_groups: bool, source: Any,
                     timeout_s: float) -> list[dict]:
    client = way.client()
    if not all_groups:
        return [admin.describe_group(client, g, source, way.coordinator(g, timeout_s), timeout_s)
                for g in group_ids]
    described = []
    for listed in admin.list_groups(client, timeout_s=timeout_s):
        g = listed["group"]
        try:
            described.append(admin.describe_group(client, g, source, way.coordinator(g, timeout_s), timeout_s))
        except admin.UnknownGroupError:  # deleted since it was listed
            continue
    return described


def _coordinator(cluster: Any, group: str, timeout_s: float) -> dict:
    from raygroups.coordinator.partitioning import partition_for

    p = partition_for(group, cluster.num_partitions)
    leader = "local"
    if cluster.replicated:
        try:
            leader = cluster.partition_state(p, timeout_s=timeout_s)["leader"]
        except (KeyError, TypeError, *ERRORS):
            leader = None
    return {"partition": p, "leader": leader}


def _describe_view(group: dict, view: str, verbose: bool = False) -> list:
    name, state = group["group"], group["state"]
    header = f"Consumer group '{name}' ({state})"
    if view == "state":
        c = group["coordinator"]
        table = _table("GROUP", "COORDINATOR (PARTITION)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
        where = _cell(c["leader"]) + ("" if c["partition"] is None else f" ({c['partition']})")
        table.add_row(name, where, group["assignment_strategy"] or "-", state,
                      str(len(group["members"])))
        return [table]
    if view == "members":
        if not group["members"]:
            return [f"Consumer group '{name}' has no active members."]
        table = _table("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                       *(["ASSIGNMENT"] if verbose else []))
        for m in group["members"]:
            table.add_row(name, m["member_id"], _cell(m["group_instance_id"]), m["host"], m["client_id"] or "-",
                          str(len(m["partitions"])), *([assignment_cell(m["partitions"])] if verbose else []))
        return [header, table]
    out: list = [header] if group["members"] else [f"Consumer group '{name}' has no active members."]
    table = _table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                   "CLIENT-ID")
    for o in group["offsets"]:
        table.add_row(name, o["topic"], str(o["partition"]), _cell(o["current_offset"]), _cell(o["log_end_offset"]),
                      _cell(o["lag"]), _cell(o["member_id"]), _cell(o["host"]), _cell(o["client_id"]))
    return out + [table]


@groups.command("delete")
@click.argument("group_ids", metavar="[GROUP]...", nargs=-1)
@click.option("--all-groups", is_flag=True,
              help="Every group of the deployment (those with active members fail: NON_EMPTY_GROUP).")
@_connection
@_json_option
def delete_groups(group_ids: tuple[str, ...], all_groups: bool, address: str | None, namespace: str,
                  bootstrap_server: str | None, timeout_ms: int, as_json: bool) -> None:
    """Delete groups that have no active members (Kafka's DeleteGroups); exit 1 if any was not deleted."""
    _groups_or_all(group_ids, all_groups)
    way = _way_in(address, namespace, bootstrap_server, timeout_ms)
    client, timeout_s = way.client(), timeout_ms / 1000
    names = list(group_ids) or [g["group"] for g in _run(admin.list_groups, client, timeout_s=timeout_s)]
    errors = _run(admin.delete_groups, client, names, timeout_s=timeout_s)
    if as_json:
        _echo_json(errors)
    elif not errors:
        click.echo("no groups to delete")
    else:
        for group, error in errors.items():
            if error == "NONE":
                click.echo(f"Deletion of group '{group}': deleted")
            else:
                click.echo(f"Deletion of group '{group}' failed: {_deletion_reason(error)} ({error})", err=True)
    sys.exit(ExitCode.OK if all(e == "NONE" for e in errors.values()) else ExitCode.ERROR)


def _deletion_reason(error: str) -> str:
    return {"NON_EMPTY_GROUP": "the group has active members",
            "GROUP_ID_NOT_FOUND": "the group does not exist"}.get(error, "the coordinator refused it")


# --- offsets ------------------------------------------------------------------------------------------
@main.group()
def offsets() -> None:
    """Reset or delete a group's committed offsets."""


def _topic_specs(topics: tuple[str, ...]) -> list[admin.TopicSpec]:
    return [admin.parse_topic_spec(t) for t in topics]


def _chosen(given: dict[str, Any]) -> str:
    """The one reset scenario option of ``given`` (each option's value, None or False when absent)."""
    chosen = [option for option, value in given.items() if value not in (None, False)]
    if len(chosen) != 1:
        raise click.UsageError(f"choose exactly one of {', '.join(given)} (got {', '.join(chosen) or 'none'})")
    return chosen[0]


def _strategy(group: str, option: str, value: Any) -> admin.ResetStrategy:
    """The reset scenario ``option`` asks for, its value checked."""
    kind = next(k for k, o in admin.STRATEGY_OPTIONS.items() if o == option)
    match kind:
        case "earliest" | "latest" | "current":
            return admin.ResetStrategy(kind)
        case "offset":
            if value < 0:
                raise AdminError(f"--to-offset must be >= 0, got {value}")
            return admin.ResetStrategy(kind, value)
        case "shift":
            return admin.ResetStrategy(kind, value)
        case "datetime":
            return admin.ResetStrategy(kind, admin.parse_datetime_ms(value))
        case "duration":
            # Kafka's resetByDuration: the offset at now minus the duration, looked up as --to-datetime's (a
            # time before 1970 is the beginning of any data).
            return admin.ResetStrategy(kind, max(0, int(time.time() * 1000) - parse_duration_ms(value)))
        case _:
            return admin.ResetStrategy(kind, offsets=read_offsets_file(value, group))


def _check_scope(topics: tuple[str, ...], all_topics: bool, from_file: str | None) -> None:
    # Kafka's ConsumerGroupCommand: one scope, --all-topics or --topic, unless --from-file names the partitions.
    if from_file is not None:
        if topics or all_topics:
            raise click.UsageError("--from-file takes its partitions from the file: give neither --topic nor "
                                   "--all-topics")
    elif bool(topics) == all_topics:
        raise click.UsageError("name the partitions to reset: --topic TOPIC[:P,...] (repeatable) or --all-topics, "
                               + ("not both" if all_topics else "got neither"))


@offsets.command("reset")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,...]",
              help="A topic, or some of its partitions (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every partition the group has a committed offset for.")
@click.option("--to-earliest", is_flag=True, help="To the first offset of the data (0 without --source).")
@click.option("--to-latest", is_flag=True, help="To the log-end offset (needs --source).")
@click.option("--to-current", is_flag=True,
              help="To the committed offset itself (where there is none, the log end: needs --source).")
@click.option("--to-offset", type=int, default=None, help="To this offset.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (may be negative).")
@click.option("--to-datetime", default=None, metavar="ISO",
              help="To the first offset at or after this time, e.g. 2026-11-26T12:00:00.000 (needs --source).")
@click.option("--by-duration", default=None, metavar="PnDTnHnMnS",
              help="To the first offset at or after now minus this ISO-8601 duration, e.g. P1DT2H, PT30M "
                   "(needs --source).")
@click.option("--from-file", default=None, metavar="FILE",
              help="To the offsets of a CSV file of topic,partition,offset lines (as --export writes); its "
                   "partitions are the scope.")
@click.option("--dry-run", is_flag=True, help="Show the new offsets and change nothing.")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@click.option("--export", is_flag=True, help="Print the plan as CSV, topic,partition,new_offset (for --from-file).")
@_source_option
@_connection
@_json_option
def reset(group: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool, to_latest: bool,
          to_current: bool, to_offset: int | None, shift_by: int | None, to_datetime: str | None,
          by_duration: str | None, from_file: str | None, dry_run: bool, execute: bool, export: bool,
          source_spec: str | None, address: str | None, namespace: str, bootstrap_server: str | None,
          timeout_ms: int, as_json: bool) -> None:
    """Reset a group's committed offsets; only while the group has no active members (Empty), as Kafka."""
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    if export and as_json:
        raise click.UsageError("--export and --json exclude each other (--export prints CSV)")
    given = {"--to-earliest": to_earliest, "--to-latest": to_latest, "--to-current": to_current,
             "--to-offset": to_offset, "--shift-by": shift_by, "--to-datetime": to_datetime,
             "--by-duration": by_duration, "--from-file": from_file}
    option = _chosen(given)
    _check_scope(topics, all_topics, from_file)
    strategy = _run(_strategy, group, option, given[option])
    specs = _run(_topic_specs, topics)
    source = _run(admin.load_source, source_spec)
    way = _way_in(address, namespace, bootstrap_server, timeout_ms)
    timeout_s = timeout_ms / 1000
    plan = _run(admin.plan_reset, way.client(), group, specs, strategy, _run(way.topics), source,
                all_topics=all_topics, timeout_s=timeout_s)
    errors = _run(admin.execute_reset, way.client(), group, plan, timeout_s=timeout_s) if execute else {}
    for row in plan:
        row["error"] = errors.get((row["topic"], row["partition"])) if execute else None
    if as_json:
        _echo_json({"group": group, "executed": execute, "partitions": plan})
    else:
        if not execute:
            click.echo("(dry run: nothing changed; --execute commits these offsets)", err=export or not dry_run)
        if export:
            click.echo(offsets_csv(plan), nl=False)
        else:
            table = _table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET",
                           *(["RESULT"] if execute else []))
            for row in plan:
                table.add_row(group, row["topic"], str(row["partition"]), _cell(row["current_offset"]),
                              str(row["new_offset"]), *([row["error"]] if execute else []))
            _print(table)
    failed = [r for r in plan if execute and r["error"] != "NONE"]
    if failed:
        click.echo(f"error: {len(failed)} partition(s) not reset (see RESULT)", err=True)
    sys.exit(ExitCode.ERROR if failed else ExitCode.OK)


@offsets.command("delete")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,...]",
              help="A topic, or some of its partitions (repeatable).")
@_connection
@_json_option
def delete_offsets(group: str, topics: tuple[str, ...], address: str | None, namespace: str,
                   bootstrap_server: str | None, timeout_ms: int, as_json: bool) -> None:
    """Delete a group's committed offsets of topics it does not consume (Kafka's OffsetDelete)."""
    specs = _run(_topic_specs, topics)
    way = _way_in(address, namespace, bootstrap_server, timeout_ms)
    result = _run(admin.delete_offsets, way.client(), group, specs, _run(way.topics),
                  timeout_s=timeout_ms / 1000)
    ok = result["error"] == "NONE" and all(e == "NONE" for e in result["partitions"].values())
    if as_json:
        _echo_json({"group": group, "error": result["error"],
                    "partitions": [{"topic": t, "partition": p, "error": e}
                                   for (t, p), e in sorted(result["partitions"].items())]})
    else:
        if result["error"] != "NONE":
            click.echo(f"error: deleting offsets of group '{group}' failed: {result['error']}", err=True)
        table = _table("TOPIC", "PARTITION", "STATUS")
        for (t, p), e in sorted(result["partitions"].items()):
            table.add_row(t, str(p), "Successful" if e == "NONE" else f"Error: {e}")
        _print(table)
    sys.exit(ExitCode.OK if ok else ExitCode.ERROR)


# --- status -------------------------------------------------------------------------------------------
@main.command()
@_ray_connection
@_json_option
def status(address: str | None, namespace: str, timeout_ms: int, as_json: bool) -> None:
    """Partitions, leaders, ISR, epochs, shards and groups: a health check, exit 4 when a partition is offline
    (3 when the deployment cannot be reached)."""
    cluster = _run(_connect, address, namespace)
    summary = _run(admin.status, cluster, timeout_ms / 1000)
    if as_json:
        _echo_json(summary)
    else:
        _print_status(summary)
    sys.exit(ExitCode.UNHEALTHY if summary["offline_partitions"] else ExitCode.OK)


def _print_status(s: dict) -> None:
    kind = "replicated" if s["replicated"] else "embedded (one node, not replicated)"
    lines = [f"deployment [bold]{s['namespace']}[/]: {s['num_partitions']} partitions, {kind}"]
    if s["nodes"]:
        alive = sorted(n for n, i in s["nodes"].items() if i["alive"])
        down = sorted(n for n, i in s["nodes"].items() if not i["alive"])
        lines.append(f"coordinator nodes alive: {', '.join(alive) or 'none'}"
                     + (f"; [red]down: {', '.join(down)}[/]" if down else ""))
    table = _table("PARTITION", "LEADER", "EPOCH", "ISR", "REPLICAS", "SHARD", "PID", "NODE", "GROUPS")
    for p in s["partitions"]:
        shard = p["shard_state"] if not p["offline"] else f"[red]{p['shard_state']}[/]"
        table.add_row(str(p["partition"]), _cell(p["leader"]) if p["leader"] else "[red]offline[/]",
                      _cell(p["leader_epoch"]), ",".join(p["isr"]) or "-", ",".join(p["replicas"]) or "-", shard,
                      _cell(p["pid"]), _cell(p["node"]), _cell(p["groups"]))
    groups = ", ".join(f"{state} {n}" for state, n in s["groups_by_state"].items()) or "none"
    health = (f"[red]offline partitions: {s['offline_partitions']}[/]" if s["offline_partitions"]
              else "[green]every partition is online[/]")
    under = s["under_replicated_partitions"]
    _print(*lines, table, f"groups by state: {groups}",
           f"under-replicated partitions: {under}" if under else "no under-replicated partition", health)
