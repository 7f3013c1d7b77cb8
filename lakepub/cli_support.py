"""What every CLI command shares: the one error handler and the --format option.

An error is one line on standard error (``error: <message>``, or a JSON log record with
``--log-format json``) and its exit code. With ``--format json`` the command's standard output
is one JSON document whatever happens: its result, or the error as an object (``code``: the exit
code, ``kind``: the error family, ``type``: the class, ``message``, and ``file``/``line``/
``field``/... where the error knows them, ``LakepubError.details()``). A command that fails
after printing its JSON report (``verify``'s mismatches, ``contract check``'s errors, the
janitor's failed deletions) prints no second document: the report says what failed (the
handler watches whether the command wrote to stdout).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import traceback
from typing import Any, Callable

import click

from lakepub import logs, output
from lakepub.errors import LakepubError
from lakepub.failures import classify

format_option = click.option("--format", "fmt", type=click.Choice(output.FORMATS), default="table",
                             show_default=True, help="Output format (json: errors too, as one JSON object).")
_log = logging.getLogger("lakepub.cli")


def error_document(exc: BaseException) -> dict[str, Any]:
    """The JSON object of an error: code, kind, type, message and the error's details."""
    if isinstance(exc, KeyboardInterrupt):
        return {"code": 130, "kind": "interrupted", "type": "KeyboardInterrupt",
                "message": "interrupted: nothing was published by the batch in progress"}
    known = classify(exc) if isinstance(exc, Exception) else None
    if known is None:
        return {"code": 1, "kind": "internal", "type": type(exc).__name__,
                "message": f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"}
    return {"code": known.exit_code, "kind": known.kind, "type": type(known).__name__,
            "message": known.one_line(), **known.details()}


class _Watched:
    """Standard output while a ``--format json`` command runs: notes whether it printed anything."""

    def __init__(self, stream: Any):
        self._stream, self.wrote = stream, False

    def write(self, text: Any) -> Any:
        """Write through, noting non-empty output."""
        self.wrote = self.wrote or bool(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _report(doc: dict[str, Any], line: str, watched: _Watched | None) -> None:
    if watched is not None and not watched.wrote:  # a report already printed is the one document
        click.echo(json.dumps(doc, default=str))
    if not logs.configured():  # a command invoked without the group (tests, embedding)
        logs.configure()
    _log.error("%s", doc["message"], extra={**{k: v for k, v in doc.items() if k != "message"}, "_text": line})


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One error handler: a LakepubError becomes one line on stderr and its exit code; so does a
    foreign exception that ``lakepub.failures.classify`` recognises (full disk, locked catalog,
    corrupt Iceberg file); anything else is an internal error (exit 1). With ``--format json``
    the error is also one JSON object on stdout."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        watched = _Watched(sys.stdout) if kwargs.get("fmt") == "json" else None
        if watched is not None:
            sys.stdout = watched
        try:
            return fn(*args, **kwargs)
        except LakepubError as exc:
            doc = error_document(exc)
            _report(doc, f"error: {doc['message']}", watched)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            doc = error_document(exc)
            _report(doc, doc["message"], watched)
            sys.exit(130)
        except Exception as exc:  # a known failure, else a bug: say so in one line, traceback on request
            if os.environ.get("LAKEPUB_DEBUG"):
                traceback.print_exc()
            doc = error_document(exc)
            line = doc["message"] + " (set LAKEPUB_DEBUG=1 for a traceback)" if doc["kind"] == "internal" \
                else f"error: {doc['message']}"
            _report(doc, line, watched)
            sys.exit(doc["code"])
        finally:
            if watched is not None and sys.stdout is watched:
                sys.stdout = watched._stream

    return wrapper


class OneLineUsage(click.Group):
    """The ``lakepub`` group: click's usage errors (an unknown command or option, a value not
    among a ``--format``'s choices, a missing argument) end like lakepub's own errors: one stderr
    line ``error: <command>: <click's message>; see '<command> --help'``, exit 2, and with
    ``--format json`` also one JSON object on stdout (``kind`` ``invalid_input``, ``type``
    ``UsageError``). Click's default was four lines (usage, hint, a blank, the error) and no JSON.
    ``lakepub`` alone still prints the help (exit 2, as click does)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "lakepub"
            message = f"{where}: {' '.join(exc.format_message().split()).rstrip('.')}; see '{where} --help'"
            if _asks_json(argv):
                try:
                    click.echo(json.dumps({"code": exc.exit_code, "kind": "invalid_input", "type": "UsageError",
                                           "message": message}))
                except BrokenPipeError:  # stdout's reader is gone (outside click's main: its EPIPE care);
                    _stdout_to_devnull()  # Python's documented remedy, so the exit's flush cannot fail too
            click.echo(f"error: {message}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:  # as click itself ends them
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if type(code) is int else 0)  # ctx.exit(N) returns N here; a command returns None


def _stdout_to_devnull() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's captured stdout)
        pass


def _asks_json(argv: list[str]) -> bool:
    """Whether the command line asks for ``--format json`` (as one or two arguments) as click reads
    it: the last ``--format`` wins, and nothing after ``--`` is an option."""
    asked, rest = None, iter(argv)
    for a in rest:
        if a == "--":
            break
        if a.startswith("--format="):
            asked = a.removeprefix("--format=")
        elif a == "--format":
            asked = next(rest, None)
    return asked == "json"
