"""``raygroups chaos``: the failover chaos benchmark (``run``) and its offline checker (``check``)."""

from __future__ import annotations

import json
import logging
import os
import sys

import click

from raygroups.cli.common import ERRORS, fail, main, parse_config
from raygroups.deployment.cluster import DEFAULT_NAMESPACE


@main.group()
def chaos() -> None:
    """The failover chaos benchmark: run it, or check a history."""


def _positive(name: str, value: float, limit: float) -> None:
    if not 0 < value <= limit:
        raise click.BadParameter(f"must be > 0 and <= {limit:g}, got {value:g}", param_hint=name)


@chaos.command()
@click.option("--seconds", type=float, default=60.0, show_default=True, help="How long faults are injected.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds the fault schedule (reproducible).")
@click.option("--faults", default="all", show_default=True,
              help="Comma-separated subset of the catalogue (see --list-faults).")
@click.option("--rate", type=float, default=12.0, show_default=True, help="Faults per minute (Poisson arrivals).")
@click.option("--groups", type=int, default=3, show_default=True, help="Consumer groups.")
@click.option("--consumers", type=int, default=3, show_default=True, help="Consumer actors per group.")
@click.option("--group-protocol", type=click.Choice(["classic", "consumer", "mixed"]), default="mixed",
              show_default=True,
              help="Kafka's group.protocol of the groups: classic, consumer (KIP-848), or mixed (every other "
                   "group speaks the consumer protocol).")
@click.option("--nodes", type=int, default=3, show_default=True,
              help="Simulated coordinator nodes of the embedded default (1: a single-node Ray).")
@click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE",
              help="A property of the embedded default's coordinator, such as shard.standby.per.partition=true "
                   "(repeatable).")
@click.option("--compaction-every", default=None, metavar="DURATION",
              help="Compaction rounds during the run: the operator's watch mode (raygroups compact --every) as a "
                   "process of its own, restarted when it dies; adds the compaction-kill and compaction-failover "
                   "faults to the catalogue. The segment size defaults to 16 KiB then (--config "
                   "offsets.topic.segment.bytes=... changes it).")
@click.option("--address", default=None, help="Run against the deployment of this Ray cluster instead.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True)
@click.option("--out", "out", default="chaos-out", show_default=True, type=click.Path(file_okay=False),
              help="Directory for history.jsonl, report.json, timeline.png.")
@click.option("--list-faults", is_flag=True, help="Print the fault catalogue and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON at the end instead of a summary.")
def run(seconds: float, seed: int, faults: str, rate: float, groups: int, consumers: int, group_protocol: str,
        nodes: int, config_items: tuple[str, ...], compaction_every: str | None, address: str | None, namespace: str,
        out: str, list_faults: bool, as_json: bool) -> None:
    """Run the failover chaos benchmark: a workload of consumer groups under a seeded fault schedule, then
    the checker's verdict (exit 0 valid, 1 violated or failed) and the report's paths."""
    from raygroups.chaos.faults import CATALOGUE, HOST_FAULTS, parse_faults
    from raygroups.cli.compact import parse_every

    if list_faults:
        for name, (what, replicated, _) in CATALOGUE.items():
            needs = " (test hosts: deploy/chaos_hosts.py)" if name in HOST_FAULTS else " (replicated)" if replicated else ""
            click.echo(f"{name:16} {what}{needs}")
        return
    _positive("--seconds", seconds, 7 * 24 * 3600)
    _positive("--rate", rate, 600)
    if not 1 <= groups <= 50:
        raise click.BadParameter(f"must be 1..50, got {groups}", param_hint="--groups")
    if not 1 <= consumers <= 20:
        raise click.BadParameter(f"must be 1..20, got {consumers}", param_hint="--consumers")
    if not 1 <= nodes <= 9:
        raise click.BadParameter(f"must be 1..9, got {nodes}", param_hint="--nodes")
    from raygroups.chaos.run import RunOptions, coordinator_config

    config = parse_config(config_items)
    if config and address is not None:
        raise click.BadParameter("applies to the embedded default only (a deployment reached by --address keeps "
                                 "its own)", param_hint="--config")
    try:
        coordinator_config(config)
    except (ValueError, TypeError) as e:
        raise click.BadParameter(str(e), param_hint="--config") from None
    every_s = parse_every(compaction_every, "--compaction-every")
    # A deployment reached by address is not simulated here: only the faults that need no node control.
    try:
        chosen = parse_faults(faults, replicated=address is None and nodes > 1, compaction=every_s is not None)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--faults") from None
    options = RunOptions(seconds=seconds, seed=seed, rate=rate, groups=groups, consumers=consumers, nodes=nodes,
                         group_protocol=group_protocol, out=out, address=address, namespace=namespace, config=config,
                         compaction_every_s=every_s)
    sys.exit(run_benchmark(options, chosen, as_json))


def run_benchmark(options, faults: list[str], as_json: bool = False, restore_output: bool = False,
                  hosts=None) -> int:
    """Run the benchmark with its live view (on a terminal) and summary; 0 when the history is valid.
    Ray's own output goes to ``<out>/ray-output.log``; ``restore_output=False`` keeps it there until the
    process exits (Ray's exit handlers print too)."""
    from raygroups.chaos.live import LiveView
    from raygroups.chaos.run import quiet_output
    from raygroups.chaos.run import run as run_chaos

    os.makedirs(options.out, exist_ok=True)
    logging.getLogger("ray").setLevel(logging.ERROR)
    with quiet_output(os.path.join(options.out, "ray-output.log"), restore=restore_output) as terminal:
        view = LiveView(terminal, enabled=not as_json and terminal.isatty())
        try:
            result = run_chaos(options, faults, view, hosts)
        except ERRORS as e:
            view.close()
            terminal.write(f"error: {e}\n")
            return 1
        if as_json:
            terminal.write(json.dumps(result.report, sort_keys=True) + "\n")
        else:
            view.summary(result)
    return 0 if result.ok else 1


@chaos.command()
@click.argument("history", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def check(history: str, as_json: bool) -> None:
    """Check HISTORY (a history.jsonl) offline; exit 0 when no invariant is violated, 1 otherwise."""
    from raygroups.chaos import HistoryError, read_history
    from raygroups.chaos import check as check_history

    try:
        result = check_history(read_history(history))
    except OSError as e:
        fail(ValueError(f"{history}: {(e.strerror or str(e)).lower()}"))
    except HistoryError as e:
        fail(ValueError(f"{history}: {e}"))
    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
    else:
        ops = result.operations
        click.echo(f"{sum(ops.values())} operations ({ops['ok']} ok, {ops['fail']} failed, {ops['info']} unknown), "
                   f"{result.faults} fault(s)")
        for v in result.violations:
            click.echo(f"VIOLATION {v.invariant}: {v.message}")
        click.echo("valid: no invariant violated" if result.ok else f"invalid: {len(result.violations)} violation(s)")
    sys.exit(0 if result.ok else 1)
