"""``raygroups chaos``: the failover chaos benchmark's commands (``check`` for now)."""

from __future__ import annotations

import json
import sys

import click

from raygroups.cli import _fail, main


@main.group()
def chaos() -> None:
    """The failover chaos benchmark: check a history."""


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
        _fail(ValueError(f"{history}: {(e.strerror or str(e)).lower()}"))
    except HistoryError as e:
        _fail(ValueError(f"{history}: {e}"))
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
