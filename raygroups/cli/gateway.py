"""``raygroups gateway``: a Kafka wire-protocol listener in front of a running deployment, in the foreground
until SIGINT or SIGTERM (then exit 0)."""

from __future__ import annotations

import signal
import sys
import threading

import click

from raygroups.cli.common import ERRORS, ExitCode, fail, init_ray, main
from raygroups.deployment.cluster import DEFAULT_NAMESPACE


@main.command()
@click.option("--listen", required=True, metavar="HOST:PORT",
              help="Where to listen (Kafka's listeners); port 0 picks a free one.")
@click.option("--address", default="auto", show_default=True, help="The Ray cluster of the deployment.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Ray namespace of the deployment.")
@click.option("--source", "source_spec", default=None, metavar="MODULE:ATTR",
              help="A raygroups.Source (or a function returning one) whose topics are served read-only.")
@click.option("--advertised-host", default=None, metavar="HOST",
              help="The host clients are told to connect to (Kafka's advertised.listeners); default: the "
                   "--listen host, or this machine's name for a wildcard address.")
def gateway(listen: str, address: str, namespace: str, source_spec: str | None, advertised_host: str | None) -> None:
    """Serve Kafka clients (consumers, admin clients) in front of a deployment until SIGINT/SIGTERM."""
    from raygroups.deployment.start import connect
    from raygroups.gateway import start
    from raygroups.gateway.node import parse_listen
    from raygroups.sources import load_source

    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from None
    stop = threading.Event()
    try:
        source = None if source_spec is None else load_source(source_spec)
        init_ray(address)
        cluster = connect(address, namespace)
        gw = start(cluster, host=host, port=port, source=source, advertised_host=advertised_host)
    except ConnectionError as e:  # no Ray there, or one that refuses this client
        fail(e, ExitCode.UNREACHABLE)
    except (*ERRORS, OSError) as e:
        fail(e)
    # After Ray is up: ray.init installs a SIGTERM handler of its own that would exit 15.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    click.echo(f"raygroups gateway: serving Kafka clients at {gw.bootstrap_servers} "
               f"(deployment {namespace!r}); stop with Ctrl-C")
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    gw.stop()
    click.echo("raygroups gateway: stopped")
