"""The ``raygroups`` command line (also ``python -m raygroups``), on click with rich output: ``deploy`` here,
the other commands in ``groups``, ``compact``, ``chaos`` and ``gateway``, what they share in ``common``.

Exit codes (``common.ExitCode``): 0 ok, 1 error (one sentence on stderr, nothing changed; or a partial
failure), 2 usage, 3 unreachable (no deployment at ``--address``/``--namespace``, a connection failure, a
``--timeout`` passed), 4 unhealthy (``status`` only: a partition offline). Every command takes ``--json``
for machines; with it a failure is one JSON object on stdout, ``{"error": "<sentence>", "exit_code": N}``
(usage errors too, except those in the options of ``raygroups`` itself).
"""

from __future__ import annotations

import json
from typing import Any

import click

from raygroups.cli import chaos, compact, gateway, groups  # noqa: F401  (each registers its commands on ``main``)
from raygroups.cli.common import ERRORS, ExitCode, fail, init_ray, main, parse_config
from raygroups.deployment.cluster import DEFAULT_NAMESPACE, READY_TIMEOUT_S
from raygroups.gateway import listeners


def deployment_summary(cluster: Any) -> dict:
    """What ``deploy`` shows: the deployment, its nodes, whether it serves, and every partition."""
    readiness = cluster.readiness()
    partitions = []
    for p in range(cluster.num_partitions):
        state = cluster.partition_state(p)
        partitions.append({"partition": p, **(state or {"replicas": None, "leader": None, "leader_epoch": None,
                                                        "isr": None, "partition_epoch": None})})
    return {"namespace": cluster.namespace, "num_partitions": cluster.num_partitions, "data_dir": cluster.data_dir,
            "nodes": cluster.nodes(), "ready": readiness["ready"], "waiting_for": readiness["waiting_for"],
            "partitions": partitions, "listeners": listeners(cluster)}


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    nodes = summary["nodes"]
    alive = sorted(n for n, info in nodes.items() if info["alive"])
    console.print(f"deployment [bold]{summary['namespace']}[/]: {summary['num_partitions']} partitions, "
                  f"data under {summary['data_dir']}/<node>, coordinator nodes alive: {', '.join(alive) or 'none'}")
    for name, info in sorted(nodes.items()):
        if info["refused"]:
            console.print(f"[red]node {name} refused:[/] {info['refused']}")
        elif not info["labelled"]:
            console.print(f"[yellow]node {name} has no raygroups.io/node label: after a restart it is a new node[/]")
    if summary["ready"]:
        console.print("[green]serving[/]: every partition has a leader whose shard is ACTIVE")
    else:
        console.print(f"[yellow]not serving yet[/]: waiting for {summary['waiting_for']}")
    if summary["listeners"]:
        console.print("Kafka clients bootstrap from: " + ",".join(summary["listeners"].values()))
    if not any(p["replicas"] for p in summary["partitions"]):
        return
    table = Table("partition", "leader", "epoch", "in-sync replicas", "replicas")
    for p in summary["partitions"]:
        if p["replicas"] is None:
            table.add_row(str(p["partition"]), "-", "-", "-", "-")
            continue
        leader = p["leader"] or "[red]offline[/]"
        table.add_row(str(p["partition"]), leader, str(p["leader_epoch"]), ",".join(p["isr"]), ",".join(p["replicas"]))
    console.print(table)


@main.command()
@click.option("--address", default="auto", show_default=True, help="The Ray cluster to deploy on.")
@click.option("--data-dir", required=True,
              help="Absolute path present on every coordinator node; each node keeps its replicas under "
                   "<data-dir>/<node name>.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Ray namespace of the deployment.")
@click.option("--partitions", "num_partitions", type=click.IntRange(1, 10_000), default=50, show_default=True,
              help="Number of __consumer_offsets partitions (fixed for the life of the deployment).")
@click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE",
              help="A Kafka property such as offsets.topic.replication.factor=3 (repeatable).")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Return once every partition is served (--no-wait: once the controller runs; partitions "
                   "come up as coordinator nodes join).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=READY_TIMEOUT_S, show_default=True,
              help="Seconds to wait for the deployment.")
@click.option("--listeners", default=None, metavar="HOST:PORT",
              help="Run a Kafka listener on every coordinator node at HOST:PORT (Kafka's listeners).")
@click.option("--advertised-host", default=None, metavar="HOST",
              help="The host Kafka clients are told to connect to (default: the --listeners host, or each "
                   "node's IP for a wildcard address).")
@click.option("--source", "source_spec", default=None, metavar="MODULE:ATTR",
              help="A raygroups.Source the listeners serve read-only (importable on every node; needs --wait).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def deploy(address: str, data_dir: str, namespace: str, num_partitions: int, config_items: tuple[str, ...],
           wait: bool, timeout_s: float, listeners: str | None, advertised_host: str | None,
           source_spec: str | None, as_json: bool) -> None:
    """Create, or resume, a replicated deployment on a Ray cluster (idempotent)."""
    from raygroups.deployment.start import deploy as deploy_deployment
    from raygroups.deployment.start import listener_spec, validate_deploy_args

    config = parse_config(config_items) or None
    try:
        validate_deploy_args(address, data_dir, namespace, num_partitions, config, wait, timeout_s)
        listener_spec(listeners, advertised_host, source_spec, wait)
        init_ray(address)
        cluster = deploy_deployment(address, data_dir=data_dir, namespace=namespace, num_partitions=num_partitions,
                                    config=config, wait=wait, timeout_s=timeout_s, listeners=listeners,
                                    advertised_host=advertised_host, source=source_spec)
        summary = deployment_summary(cluster)
    except ERRORS as e:
        fail(e, ExitCode.UNREACHABLE if isinstance(e, ConnectionError) else ExitCode.ERROR)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
    else:
        _print_summary(summary)
