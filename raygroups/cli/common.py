"""What every ``raygroups`` command shares: the command group itself, the errors a command turns into exit
code 1 with one sentence, and parsing ``--config KEY=VALUE``."""

from __future__ import annotations

import logging
import sys

import click

from raygroups import __version__

ERRORS = (ValueError, TypeError, TimeoutError, RuntimeError, ConnectionError)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raygroups")
def main() -> None:
    """raygroups: Apache Kafka's consumer-group coordinator as an actor system on Ray."""


def parse_config(items: tuple[str, ...]) -> dict[str, int | bool]:
    config: dict[str, int | bool] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        value = value.strip()
        if value.lower() in ("true", "false"):  # Kafka's boolean properties
            config[key.strip()] = value.lower() == "true"
            continue
        try:
            config[key.strip()] = int(value)
        except ValueError:
            raise click.BadParameter(f"{key}: {value!r} is not an integer (nor true/false)",
                                     param_hint="--config") from None
    return config


def init_ray(address: str) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)


def fail(error: BaseException) -> None:
    click.echo(f"error: {error}", err=True)
    sys.exit(1)
