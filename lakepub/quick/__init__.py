"""The quick read path: ``lakepub status``, ``log`` and ``query`` without pyiceberg, SQLAlchemy,
pydantic or pyarrow, for the embedded default workspace (issue 10: a new process in <= 0.25 s).

The full path imports ~1 s of libraries before it reads anything (pyiceberg and SQLAlchemy to
open the catalog, pydantic and pyarrow to load the configuration and contracts, DuckDB and its
extensions to scan). What these commands print is a function of the catalog's current pointers,
the metadata JSON they name, the configuration, the landing folder and the clock; the quick path
reads the pointers with ``sqlite3`` and the metadata with ``json`` (``catalog.py``), takes the
configuration from a record the full path wrote (stamped with the sha256 of the configuration's
files), and uses stored figures only under the exact key they were computed for
(``reports.py``, ``query.py``).

The invariant: the quick path prints byte for byte what the full path would print (the same
records, rendered by the same functions, ``lakepub.report_rows``), or it declines and the full
path runs. It declines on anything it does not know exactly: no record yet or a configuration
changed since, a catalog other than SQLite, a remote warehouse, an unknown or retired dataset, a
status not stored for the current snapshot, any error (the full path reports errors, exit codes
included). ``LAKEPUB_QUICK=0`` turns it off. ``tests/test_quick.py`` runs both paths over the
same workspace states and compares their output; ``scripts/bench/startup.py`` measures the start.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakepub.quick.catalog import remember, stamp  # noqa: F401 - the full path's hooks

__all__ = ["audit_location", "enabled", "log", "query", "remember", "remember_status", "stamp", "status"]


def enabled() -> bool:
    return os.environ.get("LAKEPUB_QUICK", "1") not in ("0", "false", "no", "off")


def _trace(command: str, outcome: object) -> None:
    """``LAKEPUB_QUICK=trace``: say on stderr which path answered (tests assert it)."""
    if os.environ.get("LAKEPUB_QUICK") == "trace":
        import sys

        reason = "answered" if outcome is None else f"declined ({type(outcome).__name__}: {outcome})"
        print(f"quick {command}: {reason}", file=sys.stderr)


def remember_status(ws: Any, status: Any, spec: Any, stamp: str | None, audit_before: str | None) -> None:
    """Store a status computed by the full path for the quick path (``quick/reports.py``)."""
    from lakepub.quick.reports import remember_status as store

    store(ws, status, spec, stamp, audit_before)


def audit_location(ws: Any) -> str | None:
    """The audit table's current metadata location, through the full path's catalog (or None)."""
    try:
        from lakepub.store.audit import audit_table

        table = audit_table(ws.catalog, ws.config.namespace)
        return table.metadata_location if table is not None else None
    except Exception:  # noqa: BLE001 - the status reports the problem itself
        return None


def log(workspace: Path, dataset: str, limit: int | None, fmt: str) -> str | None:
    """What ``lakepub log`` prints, or None: the full path must run."""
    if not enabled():
        return None
    from lakepub import output
    from lakepub.quick import reports
    from lakepub.quick.catalog import QuickWorkspace
    from lakepub.report_rows import log_text

    try:
        qw = QuickWorkspace.open(workspace)
        try:
            entries = reports.log(qw, dataset, limit)
        finally:
            qw.close()
    except Exception as exc:  # noqa: BLE001 - Unsupported, or whatever it is: the full path says it properly
        _trace("log", exc)
        return None
    _trace("log", None)
    return output.to_json([e.as_dict() for e in entries]) if fmt == "json" else log_text(entries)


def status(workspace: Path, dataset: str | None, landing: str | None, as_of: str | None, fmt: str) -> str | None:
    """What ``lakepub status`` prints, or None: the full path must run."""
    if not enabled() or landing is not None:
        return None
    from lakepub import output
    from lakepub.quick import reports
    from lakepub.quick.catalog import QuickWorkspace, Unsupported
    from lakepub.report_rows import status_text

    try:
        now = _instant(as_of) if as_of else None
        qw = QuickWorkspace.open(workspace)
        try:
            names = [dataset] if dataset else [n for n in sorted(qw.datasets) if reports.retired(qw, n) is None]
            if not names:
                raise Unsupported("no dataset to show")  # the full path prints nothing at all
            statuses = [reports.status(qw, name, now) for name in names]
            if dataset:
                statuses = [reports.retirement_note(qw, s) for s in statuses]
        finally:
            qw.close()
    except Exception as exc:  # noqa: BLE001 - Unsupported, or an error the full path reports
        _trace("status", exc)
        return None
    _trace("status", None)
    if fmt == "json":
        return output.to_json([s.as_dict() for s in statuses])
    return "\n".join(status_text(s) for s in statuses)


def query(workspace: Path, sql: str, fmt: str) -> str | None:
    """What ``lakepub query`` prints, or None: the full path must run."""
    if not enabled():
        return None
    from lakepub.quick.sql import run

    try:
        text = run(workspace, sql, fmt)
    except Exception as exc:  # noqa: BLE001 - Unsupported, a DuckDB error, a refused statement: the full path
        _trace("query", exc)
        return None
    _trace("query", None)
    return text


def _instant(text: str) -> datetime:
    """``cli._instant`` (a bad one raises ValueError here: the full path reports it)."""
    at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
