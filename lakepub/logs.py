"""Logs: what lakepub tells an operator while it works, as text or one JSON object per line.

Every module logs under the ``lakepub`` logger (``lakepub.publish``, ``lakepub.run``,
``lakepub.cli``); a library user gets nothing unless they configure ``logging`` themselves (the
``lakepub`` logger has a ``NullHandler``). The CLI calls ``configure`` once per invocation from
the top-level group's options: ``--log-format text|json`` (env ``LAKEPUB_LOG_FORMAT``),
``-v``/``-q`` and ``LAKEPUB_LOG_LEVEL`` (``debug|info|warning|error``). Records go to standard
error, never to standard output, which holds the command's result.

* **text** (the default) is for a person at a terminal: ``<level>: <message>``, warnings and
  errors only unless ``-v`` (info) or ``-vv`` (debug). An error keeps its one line,
  ``error: ...``, as before logs existed.
* **json** is for a scheduler: one object per line, ``ts`` (UTC, ms), ``level``, ``logger``,
  ``message`` and the record's context where known (``dataset``, ``batch_id``, ``snapshot_id``,
  ``source``, ``start``, ``end``, ``events``, ``counts``, ``duration_s``, ``attempt``, ``code``,
  ``kind``...), passed with ``extra=``. Info by default (batch started, published, already
  published, refused, commit retry), ``-v`` adds debug, ``-q`` keeps only errors.

Invariant: a record below the configured level costs one ``isEnabledFor`` check (cached by
``logging``); the helpers below build their ``extra`` mappings and messages only after it, so
the publish path does no formatting work when logs are off. Measured (``scripts/bench/logs.py``, 2
loaded cores): a batch's helpers cost 0.65-0.9 us with logs off (three empty Python calls: 0.7-0.9
us), ~0.2-0.3 ms with JSON logs at debug (stdlib ``logging`` record creation and ``json.dumps``), against
~0.1-0.2 s per published batch; ``Workspace.run`` of 200k events with JSON logs vs without measured
0.71x-1.06x, i.e. within the machine's noise. ``json`` and ``logging`` are the only
imports (both already loaded by Python's start-up or the standard library lakepub uses).
``warnings.warn`` of lakepub (an unreadable key index, a version hint not written) becomes a
``warning`` record of ``lakepub.warnings`` once the CLI configured logs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from typing import Any, Mapping

FORMATS = ("text", "json")
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
ROOT = "lakepub"

logging.getLogger(ROOT).addHandler(logging.NullHandler())
_publish = logging.getLogger("lakepub.publish")
_run = logging.getLogger("lakepub.run")
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, then every ``extra=`` field."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``<level>: <message>``, the way lakepub printed errors before it had logs (a record whose
    ``extra`` holds ``_text`` prints that line as is: the CLI's error lines)."""

    def format(self, record: logging.LogRecord) -> str:
        line = getattr(record, "_text", None) or f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (click's test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self):  # noqa: D401 - a property of StreamHandler
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


_state: dict[str, Any] = {"handler": None, "format": "text", "showwarning": None}


def level_for(log_format: str, verbose: int = 0, quiet: int = 0) -> int:
    """The level a CLI invocation logs at: ``LAKEPUB_LOG_LEVEL``, else info for json and warning
    for text; each ``-v`` one step more (down to debug), ``-q`` errors only."""
    env = os.environ.get("LAKEPUB_LOG_LEVEL", "").strip().lower()
    if env and env not in LEVELS:
        from lakepub.errors import ConfigError

        raise ConfigError(f"LAKEPUB_LOG_LEVEL={env!r}: expected one of {', '.join(LEVELS)}")
    level = LEVELS[env] if env else (logging.INFO if log_format == "json" else logging.WARNING)
    if quiet:
        return max(level, logging.ERROR)
    return max(logging.DEBUG, level - 10 * verbose)


def configure(log_format: str = "text", verbose: int = 0, quiet: int = 0) -> None:
    """Send the ``lakepub`` loggers to standard error in ``log_format`` at the CLI's level
    (replacing what an earlier call installed), and lakepub's ``warnings`` with them."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {FORMATS}")
    level = level_for(log_format, verbose, quiet)  # first: a bad LAKEPUB_LOG_LEVEL changes nothing
    root = logging.getLogger(ROOT)
    if _state["handler"] is not None:
        root.removeHandler(_state["handler"])
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    _state.update(handler=handler, format=log_format)
    if _state["showwarning"] is None:
        _state["showwarning"] = warnings.showwarning
    warnings.showwarning = _show_warning


def configured() -> bool:
    """Whether ``configure`` ran in this process (the CLI's group did)."""
    return _state["handler"] is not None


def log_format() -> str:
    """The configured format (``text`` before ``configure``)."""
    return _state["format"]


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    logger = logging.getLogger("lakepub.warnings")
    if logger.isEnabledFor(logging.WARNING):
        logger.warning("%s", message, extra={"category": category.__name__})


# --- the publish path: each helper returns at once when its level is off --------------------


def batch_started(dataset: str, batch_id: str, source: str, start: Mapping[str, int], end: Mapping[str, int],
                  events: int) -> None:
    """A batch is about to be published (after validation, before the catalog is read)."""
    if _publish.isEnabledFor(logging.INFO):
        _publish.info("batch started: %s from %s %s -> %s, %d events", dataset, source, _vec(start), _vec(end),
                      events, extra={"event": "batch_started", "dataset": dataset, "batch_id": batch_id,
                                     "source": source, "start": _normal(start), "end": _normal(end), "events": events})


def batch_done(result: Any, seconds: float) -> None:
    """A batch was published, or found already published (``result``: a ``PublishResult``)."""
    if not _publish.isEnabledFor(logging.INFO):
        return
    extra = {"dataset": result.dataset, "batch_id": result.batch_id, "snapshot_id": result.snapshot_id,
             "source": result.source, "start": result.start, "end": result.end, "duration_s": round(seconds, 4),
             "attempts": result.attempts}
    if result.status == "already-published":
        _publish.info("already published: batch %s of %s is in snapshot %s; nothing to do", result.batch_id[:12],
                      result.dataset, result.snapshot_id, extra={"event": "already_published", **extra})
        return
    c = result.counts
    _publish.info("published %s snapshot %s (batch %s): %d events, %d entities changed, %d duplicates, "
                  "%d partition(s) rewritten in %.3f s", result.dataset, result.snapshot_id, result.batch_id[:12],
                  c.events, c.entities_changed, c.duplicates, len(result.partitions), seconds,
                  extra={"event": "published", **extra, "counts": dict(vars(c)), "partitions": len(result.partitions),
                         "datasets": sorted(result.datasets)})


def projected(dataset: str, batch_id: str, attempt: int, ledger_snapshot: int | None, new_ledger_rows: int) -> None:
    """Debug: the batch was projected against the ledger at ``ledger_snapshot``."""
    if _publish.isEnabledFor(logging.DEBUG):
        _publish.debug("projected %s batch %s against ledger snapshot %s: %d new ledger row(s) (attempt %d)",
                       dataset, batch_id[:12], ledger_snapshot, new_ledger_rows, attempt,
                       extra={"event": "projected", "dataset": dataset, "batch_id": batch_id, "attempt": attempt,
                              "ledger_snapshot": ledger_snapshot, "new_ledger_rows": new_ledger_rows})


def refused(dataset: str, batch_id: str, source: str, exc: Exception) -> None:
    """The protocol refused a batch (payload conflict, stale start, foreign change); the CLI
    reports the error itself, so this is an info record carrying the batch's identity."""
    if _publish.isEnabledFor(logging.INFO):
        _publish.info("refused: batch %s of %s: %s", batch_id[:12], dataset, " ".join(str(exc).split()),
                      extra={"event": "refused", "dataset": dataset, "batch_id": batch_id, "source": source,
                             "type": type(exc).__name__})


def commit_retry(dataset: str, batch_id: str, attempt: int, wait_s: float) -> None:
    """A commit lost a race to a concurrent writer; the batch is retried after ``wait_s``."""
    if _publish.isEnabledFor(logging.INFO):
        _publish.info("commit retry: %s batch %s lost a race (attempt %d), retrying in %.3f s", dataset,
                      batch_id[:12], attempt, wait_s,
                      extra={"event": "commit_retry", "dataset": dataset, "batch_id": batch_id,
                             "attempt": attempt, "wait_s": round(wait_s, 4)})


def built(dataset: str, entity: str) -> None:
    """A dataset added to an entity with history was built from the ledger."""
    if _publish.isEnabledFor(logging.INFO):
        _publish.info("built %s from the ledger of entity %s", dataset, entity,
                      extra={"event": "built", "dataset": dataset, "entity": entity})


def run_started(dataset: str, source: str, landing: str, committed: Mapping[str, int], pending: int) -> None:
    """``run`` found ``pending`` records past the committed position of its source."""
    if _run.isEnabledFor(logging.INFO):
        _run.info("run %s: %d record(s) pending in %s past %s", dataset, pending, landing, _vec(committed),
                  extra={"event": "run_started", "dataset": dataset, "source": source, "landing": landing,
                         "start": _normal(committed), "pending": pending})


def run_done(result: Any) -> None:
    """``run`` finished (``result``: a ``RunResult``)."""
    if _run.isEnabledFor(logging.INFO):
        _run.info("run %s: %d batch(es), %d events; %s now at %s", result.dataset, len(result.batches),
                  result.events, result.source, _vec(result.end),
                  extra={"event": "run_done", "dataset": result.dataset, "source": result.source,
                         "batches": len(result.batches), "events": result.events, "end": result.end,
                         "snapshot_id": result.batches[-1].snapshot_id if result.batches else None})


def _vec(vector: Mapping[str, int]) -> str:
    return json.dumps(dict(vector), sort_keys=True)


def _normal(vector: Mapping[str, int]) -> dict[str, int]:
    """A position vector as results and ``lakepub log`` show it: zero offsets dropped, sorted."""
    return {k: int(v) for k, v in sorted(vector.items()) if v}
