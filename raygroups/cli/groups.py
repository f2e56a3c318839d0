"""``raygroups groups|offsets|status``: the operator's commands, after ``kafka-consumer-groups.sh``.

Each connects with ``--address`` (default ``auto``) and ``--namespace``, prints a rich table or, with
``--json``, one JSON document; exit 0 ok, 1 error (one sentence on stderr, nothing changed), 2 usage.
The rules live in ``raygroups.admin``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from raygroups import admin
from raygroups.admin import AdminError
from raygroups.cli.common import ERRORS, fail, init_ray, main
from raygroups.deployment.cluster import DEFAULT_NAMESPACE


def _connection(f):
    f = click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
                     help="Ray namespace of the deployment.")(f)
    return click.option("--address", default="auto", show_default=True,
                        help="The Ray cluster of the deployment.")(f)


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(f)


def _source_option(f):
    return click.option("--source", "source_spec", default=None, metavar="MODULE:ATTR",
                        help="A raygroups.Source (or a function returning one) that gives the topics' log-end "
                             "offsets: lag, --to-latest, --to-datetime.")(f)


def _connect(address: str, namespace: str):
    from raygroups.deployment.start import connect

    init_ray(address)
    return connect(address, namespace)


def _run(fn, *args: Any) -> Any:
    """Call ``fn``; an ``AdminError`` or a connection problem is one sentence and exit 1."""
    import ray.exceptions

    try:
        return fn(*args)
    except (AdminError, *ERRORS) as e:
        fail(e)
    except ray.exceptions.RayError as e:  # an actor of the deployment died or restarts under the call
        fail(RuntimeError(f"the deployment did not answer ({type(e).__name__}); try again"))


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


# --- groups -------------------------------------------------------------------------------------------
@main.group()
def groups() -> None:
    """List, describe and delete consumer groups."""


@groups.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(admin.GROUP_STATES, case_sensitive=False),
              help="Only groups in this state (repeatable).")
@_connection
@_json_option
def list_groups(states: tuple[str, ...], address: str, namespace: str, as_json: bool) -> None:
    """Every group of the deployment, with its state."""
    canonical = [next(s for s in admin.GROUP_STATES if s.lower() == state.lower()) for state in states]
    cluster = _run(_connect, address, namespace)
    rows = _run(admin.list_groups, cluster.client(), canonical)
    if as_json:
        _echo_json(rows)
        return
    table = _table("GROUP", "STATE", "PROTOCOL-TYPE")
    for row in rows:
        table.add_row(row["group"], row["state"], row["protocol_type"] or "-")
    _print(table if rows else "no groups")


@groups.command("describe")
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@click.option("--members", "view", flag_value="members", help="The members and how many partitions each owns.")
@click.option("--offsets", "view", flag_value="offsets", default=True,
              help="Committed offsets, log-end offsets and lag per partition, with their owner (the default).")
@click.option("--state", "view", flag_value="state", help="State, coordinator, assignment strategy, member count.")
@_source_option
@_connection
@_json_option
def describe(group_ids: tuple[str, ...], view: str, source_spec: str | None, address: str, namespace: str,
             as_json: bool) -> None:
    """Describe groups: their offsets and lag (default), members, or state."""
    source = _run(admin.load_source, source_spec)
    cluster = _run(_connect, address, namespace)
    described = [_run(admin.describe_group, cluster.client(), g, source, _coordinator(cluster, g)) for g in group_ids]
    if as_json:
        _echo_json(described)
        return
    for group in described:
        _print(*_describe_view(group, view))


def _coordinator(cluster: Any, group: str) -> dict:
    from raygroups.coordinator.partitioning import partition_for

    p = partition_for(group, cluster.num_partitions)
    leader = "local"
    if cluster.replicated:
        try:
            leader = cluster.partition_state(p)["leader"]
        except (KeyError, TypeError, *ERRORS):
            leader = None
    return {"partition": p, "leader": leader}


def _describe_view(group: dict, view: str) -> list:
    name, state = group["group"], group["state"]
    header = f"Consumer group '{name}' ({state})"
    if view == "state":
        c = group["coordinator"]
        table = _table("GROUP", "COORDINATOR (PARTITION)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
        table.add_row(name, f"{_cell(c['leader'])} ({c['partition']})", group["assignment_strategy"] or "-", state,
                      str(len(group["members"])))
        return [table]
    if view == "members":
        if not group["members"]:
            return [f"Consumer group '{name}' has no active members."]
        table = _table("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
        for m in group["members"]:
            table.add_row(name, m["member_id"], _cell(m["group_instance_id"]), m["host"], m["client_id"] or "-",
                          str(len(m["partitions"])))
        return [header, table]
    out: list = [header] if group["members"] else [f"Consumer group '{name}' has no active members."]
    table = _table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                   "CLIENT-ID")
    for o in group["offsets"]:
        table.add_row(name, o["topic"], str(o["partition"]), _cell(o["current_offset"]), _cell(o["log_end_offset"]),
                      _cell(o["lag"]), _cell(o["member_id"]), _cell(o["host"]), _cell(o["client_id"]))
    return out + [table]


@groups.command("delete")
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@_connection
@_json_option
def delete_groups(group_ids: tuple[str, ...], address: str, namespace: str, as_json: bool) -> None:
    """Delete groups that have no active members (Kafka's DeleteGroups); exit 1 if any was not deleted."""
    cluster = _run(_connect, address, namespace)
    errors = _run(admin.delete_groups, cluster.client(), list(group_ids))
    if as_json:
        _echo_json(errors)
    else:
        for group, error in errors.items():
            if error == "NONE":
                click.echo(f"Deletion of group '{group}': deleted")
            else:
                click.echo(f"Deletion of group '{group}' failed: {_deletion_reason(error)} ({error})", err=True)
    sys.exit(0 if all(e == "NONE" for e in errors.values()) else 1)


def _deletion_reason(error: str) -> str:
    return {"NON_EMPTY_GROUP": "the group has active members",
            "GROUP_ID_NOT_FOUND": "the group does not exist"}.get(error, "the coordinator refused it")


# --- offsets ------------------------------------------------------------------------------------------
@main.group()
def offsets() -> None:
    """Reset or delete a group's committed offsets."""


def _topic_specs(topics: tuple[str, ...]) -> list[admin.TopicSpec]:
    return [admin.parse_topic_spec(t) for t in topics]


def _strategy(to_earliest: bool, to_latest: bool, to_offset: int | None, shift_by: int | None,
              to_datetime: str | None) -> admin.ResetStrategy:
    chosen = [name for name, given in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                       ("--to-offset", to_offset is not None), ("--shift-by", shift_by is not None),
                                       ("--to-datetime", to_datetime is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("choose exactly one of --to-earliest, --to-latest, --to-offset, --shift-by, "
                               f"--to-datetime (got {', '.join(chosen) or 'none'})")
    if to_earliest:
        return admin.ResetStrategy("earliest")
    if to_latest:
        return admin.ResetStrategy("latest")
    if to_offset is not None:
        if to_offset < 0:
            raise AdminError(f"--to-offset must be >= 0, got {to_offset}")
        return admin.ResetStrategy("offset", to_offset)
    if shift_by is not None:
        return admin.ResetStrategy("shift", shift_by)
    return admin.ResetStrategy("datetime", admin.parse_datetime_ms(to_datetime))


@offsets.command("reset")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,...]",
              help="A topic, or some of its partitions (repeatable).")
@click.option("--to-earliest", is_flag=True, help="To the first offset of the data (0 without --source).")
@click.option("--to-latest", is_flag=True, help="To the log-end offset (needs --source).")
@click.option("--to-offset", type=int, default=None, help="To this offset.")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (may be negative).")
@click.option("--to-datetime", default=None, metavar="ISO",
              help="To the first offset at or after this time, e.g. 2026-11-26T12:00:00.000 (needs --source).")
@click.option("--dry-run", is_flag=True, help="Show the new offsets and change nothing.")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@_source_option
@_connection
@_json_option
def reset(group: str, topics: tuple[str, ...], to_earliest: bool, to_latest: bool, to_offset: int | None,
          shift_by: int | None, to_datetime: str | None, dry_run: bool, execute: bool, source_spec: str | None,
          address: str, namespace: str, as_json: bool) -> None:
    """Reset a group's committed offsets; only while the group has no active members (Empty), as Kafka."""
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    strategy = _run(_strategy, to_earliest, to_latest, to_offset, shift_by, to_datetime)
    specs = _run(_topic_specs, topics)
    source = _run(admin.load_source, source_spec)
    cluster = _run(_connect, address, namespace)
    plan = _run(admin.plan_reset, cluster.client(), group, specs, strategy, cluster.topics(), source)
    errors = _run(admin.execute_reset, cluster.client(), group, plan) if execute else {}
    for row in plan:
        row["error"] = errors.get((row["topic"], row["partition"])) if execute else None
    if as_json:
        _echo_json({"group": group, "executed": execute, "partitions": plan})
    else:
        if not execute:
            click.echo("(dry run: nothing changed; --execute commits these offsets)", err=not dry_run)
        table = _table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", *(["RESULT"] if execute else []))
        for row in plan:
            table.add_row(group, row["topic"], str(row["partition"]), _cell(row["current_offset"]),
                          str(row["new_offset"]), *([row["error"]] if execute else []))
        _print(table)
    failed = [r for r in plan if execute and r["error"] != "NONE"]
    if failed:
        click.echo(f"error: {len(failed)} partition(s) not reset (see RESULT)", err=True)
    sys.exit(1 if failed else 0)


@offsets.command("delete")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,...]",
              help="A topic, or some of its partitions (repeatable).")
@_connection
@_json_option
def delete_offsets(group: str, topics: tuple[str, ...], address: str, namespace: str, as_json: bool) -> None:
    """Delete a group's committed offsets of topics it does not consume (Kafka's OffsetDelete)."""
    specs = _run(_topic_specs, topics)
    cluster = _run(_connect, address, namespace)
    result = _run(admin.delete_offsets, cluster.client(), group, specs, cluster.topics())
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
    sys.exit(0 if ok else 1)


# --- status -------------------------------------------------------------------------------------------
@main.command()
@_connection
@_json_option
def status(address: str, namespace: str, as_json: bool) -> None:
    """Partitions, leaders, ISR, epochs, shards and groups; exit 1 when a partition is offline (a health check)."""
    cluster = _run(_connect, address, namespace)
    summary = _run(admin.status, cluster)
    if as_json:
        _echo_json(summary)
    else:
        _print_status(summary)
    sys.exit(1 if summary["offline_partitions"] else 0)


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
