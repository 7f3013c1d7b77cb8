"""What every CLI command shares: the one error handler and the --format option."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from typing import Any, Callable

import click

from lakepub import output
from lakepub.errors import LakepubError
from lakepub.failures import classify

format_option = click.option("--format", "fmt", type=click.Choice(output.FORMATS), default="table",
                             show_default=True, help="Output format.")


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One error handler: a LakepubError becomes one line on stderr and its exit code; so does a
    foreign exception that ``lakepub.failures.classify`` recognises (full disk, locked catalog,
    corrupt Iceberg file); anything else is an internal error (exit 1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LakepubError as exc:
            click.echo(f"error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing was published by the batch in progress", err=True)
            sys.exit(130)
        except Exception as exc:  # a known failure, else a bug: say so in one line, traceback on request
            if os.environ.get("LAKEPUB_DEBUG"):
                traceback.print_exc()
            known = classify(exc)
            if known is not None:
                click.echo(f"error: {known.one_line()}", err=True)
                sys.exit(known.exit_code)
            click.echo(f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())} "
                       "(set LAKEPUB_DEBUG=1 for a traceback)", err=True)
            sys.exit(1)

    return wrapper
