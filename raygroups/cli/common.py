"""What every ``raygroups`` command shares: the command group itself, the exit codes, how a failure is told
(one sentence on stderr, or with ``--json`` one JSON object on stdout), and parsing ``--config KEY=VALUE``."""

from __future__ import annotations

import enum
import json
import logging
import os
import sys
from typing import NoReturn

import click

from raygroups import __version__

ERRORS = (ValueError, TypeError, TimeoutError, RuntimeError, ConnectionError)


class ExitCode(enum.IntEnum):
    """Every ``raygroups`` command's exit codes (README and docs/operations.md list them)."""

    OK = 0           # it did what was asked
    ERROR = 1        # one sentence, nothing changed; or a partial failure, reported per group or partition
    USAGE = 2        # click's: a missing or malformed option, options that exclude each other
    UNREACHABLE = 3  # no deployment at --address/--namespace, a connection failure, --timeout passed
    UNHEALTHY = 4    # ``status`` only: a partition is offline


_JSON = "raygroups.json"  # ctx.meta: --json is on the command line


class _Main(click.Group):
    """The ``raygroups`` group: with ``--json`` on the command line, a usage error of a subcommand is one JSON
    object on stdout too (an error in the options of ``raygroups`` itself stays click's text)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_JSON] = "--json" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            if not ctx.meta.get(_JSON):
                raise
            _echo_error(e.format_message(), e.exit_code)
            ctx.exit(e.exit_code)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raygroups")
def main() -> None:
    """raygroups: Apache Kafka's consumer-group coordinator as an actor system on Ray.

    Exit codes: 0 ok, 1 error (nothing changed, or a partial failure), 2 usage, 3 unreachable (no deployment,
    a connection failure, --timeout passed), 4 unhealthy (status: a partition offline). With --json, a
    failure is one JSON object on stdout: {"error": "<sentence>", "exit_code": N}.
    """


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
    """Join the Ray cluster at ``address``; ``ConnectionError`` in one sentence when it refuses this client's
    token (Ray's token authentication), whose retries Ray's core would otherwise log as warnings first."""
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # the core's retry warnings: not the operator's
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except ray.exceptions.AuthenticationError:
        ray.shutdown()
        if os.environ.get("RAY_AUTH_MODE") == "token":
            raise ConnectionError(f"the Ray cluster at {address} refused this client's token: give it the "
                                  f"cluster's (~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)") from None
        raise ConnectionError(f"the Ray cluster at {address} requires token authentication: set RAY_AUTH_MODE=token "
                              f"and give this client the cluster's token (~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or "
                              f"RAY_AUTH_TOKEN)") from None


def json_requested() -> bool:
    """Whether ``--json`` is on the command line being run."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_JSON))


def _echo_error(sentence: str, code: int) -> None:
    # A machine reading stdout finds the error where it expects the document.
    if json_requested():
        click.echo(json.dumps({"error": sentence, "exit_code": int(code)}))
    else:
        click.echo(f"error: {sentence}", err=True)


def fail(error: BaseException, code: ExitCode = ExitCode.ERROR) -> NoReturn:
    """Tell ``error`` in one sentence (JSON with ``--json``) and exit with ``code``."""
    _echo_error(str(error), code)
    sys.exit(int(code))
