"""The output partitions an input's rows map to, when its partitions do not say (remembered by snapshot).

A derived dataset's candidates (``state.candidates``) come from the inputs' recorded partition
labels, except for an input partitioned coarser than the expression that maps it (a daily rollup
over a ``month(day)`` dataset reads ``day(day)``): then the labels are the distinct values of the
expression over the input's published rows, a DuckDB ``SELECT DISTINCT`` over that column (~10 ms
at 1M rows, ~35 ms at 10M on the 2-core VM: a pass over the column, as long as ~10% of the whole
build of ``scripts/bench/derive.py``).

A snapshot's rows never change, so the labels are a function of (table uuid, snapshot id,
expression): remembered in the process and in ``<workspace>/.lakepub/labels/<table uuid>.json``
(the newest snapshot read, one small file per input table, rewritten atomically when the snapshot
changes; a file that does not match is ignored and the rows scanned). So the second plan of an
offline rebuild (before its swap) and a rebuild after a definition change, in a new process, do
not scan an input that did not move; an input that moved is scanned once per new snapshot.
The invariant: the labels used are exactly the DISTINCT of the snapshot's rows; nothing else is
ever looked up under its key.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

FORMAT = 1
_MEMO: OrderedDict[tuple, frozenset[str]] = OrderedDict()
_MEMO_SIZE = 256
_LOCK = threading.Lock()


def distinct_labels(ws, table, expr) -> set[str]:
    """The labels of ``expr`` over ``table``'s current snapshot (a table just loaded)."""
    if table is None or table.metadata.current_snapshot_id is None:
        return set()
    uuid, snapshot = str(table.metadata.table_uuid), table.metadata.current_snapshot_id
    key = (uuid, snapshot, _expr_key(expr))
    with _LOCK:
        found = _MEMO.get(key)
    if found is None:
        cache = ws.config.root / ".lakepub" / "labels" / f"{uuid}.json"
        found = _read(cache, uuid, snapshot, key[2])
        if found is None:
            found = frozenset(_scan(ws, table, expr))
            _write(cache, uuid, snapshot, key[2], found)
        with _LOCK:
            _MEMO[key] = found
            while len(_MEMO) > _MEMO_SIZE:
                _MEMO.popitem(last=False)
    return set(found)


def _expr_key(expr) -> str:
    return json.dumps([expr.kind, expr.column, expr.buckets])


def _scan(ws, table, expr) -> set[str]:
    from lakepub import duck, views

    con = duck.connect(ws.config.catalog)
    try:
        source = views.resolve(table, ws.config.root / ".lakepub" / "views").table_sql()
        rows = con.execute(f"SELECT DISTINCT {duck.name(expr.column)} FROM {source}").to_arrow_table()
    finally:
        con.close()
    return set(expr.labels(rows))  # "null" too: the rows whose column is null are a partition


def _read(path: Path, uuid: str, snapshot: int, expr: str) -> frozenset[str] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") == FORMAT and record.get("table_uuid") == uuid and record.get("snapshot_id") == snapshot:
            labels = record["labels"].get(expr)
            if isinstance(labels, list) and all(isinstance(label, str) for label in labels):
                return frozenset(labels)
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        pass  # no cache, or not one we wrote: scan the rows
    return None


def _write(path: Path, uuid: str, snapshot: int, expr: str, labels: frozenset[str]) -> None:
    """Best effort (a read-only workspace still plans); the other expressions of the same snapshot kept."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("table_uuid") != uuid or record.get("snapshot_id") != snapshot or record.get("format") != FORMAT:
            record = None
    except (OSError, ValueError, AttributeError):
        record = None
    record = record or {"format": FORMAT, "table_uuid": uuid, "snapshot_id": snapshot, "labels": {}}
    try:
        record["labels"][expr] = sorted(labels)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        os.replace(temporary, path)
    except (OSError, TypeError, AttributeError):
        pass


def clear_memo() -> None:
    """Forget the labels remembered in this process (tests, benchmarks of a cold plan)."""
    with _LOCK:
        _MEMO.clear()
