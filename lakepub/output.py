"""Text, CSV and JSON rendering for the CLI."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # annotations only: `lakepub --help` does not load pyarrow
    import pyarrow as pa

FORMATS = ("table", "json")
QUERY_FORMATS = ("table", "csv", "json")


def to_json(value: Any) -> str:
    return json.dumps(value, default=_default, indent=2, sort_keys=False)


def _default(value: Any) -> Any:
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "as_dict"):
        return value.as_dict()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width text table; numbers are right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float, Decimal)) and not isinstance(row[i], bool)
                   for row in rows) and bool(rows) for i in range(len(headers))]

    def fmt(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    lines = [fmt(headers), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)


def render_query(result: pa.Table, fmt: str) -> str:
    names = list(result.column_names)
    if len(set(names)) == len(names):
        pylist = _pylist(result)
        if fmt == "json":
            return to_json(pylist)
        rows = [list(r.values()) for r in pylist]
    else:  # two columns of one name (SELECT * over a join): rows by position, never a column dropped
        if fmt == "json":
            from lakepub.errors import QueryError

            twice = next(n for n in names if names.count(n) > 1)
            raise QueryError(f"query gives two columns one name ('{twice}'), which a JSON object cannot hold; "
                             "name each column once (AS name), or use --format table or csv")
        rows = _by_position(result)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow([_cell(v) for v in row])
        return buf.getvalue().rstrip("\n")
    return table(names, rows) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"


def _by_position(result: Any) -> list[list[Any]]:
    """The rows as lists of Python values in column order (``_pylist``'s errors)."""
    try:
        columns = [column.to_pylist() for column in result.columns]
    except (OverflowError, ValueError):
        _pylist(result)  # raises the QueryError naming the column
        raise
    return [list(row) for row in zip(*columns)]


def _pylist(result: Any) -> list[dict[str, Any]]:
    """The rows as Python values; a date or timestamp Python cannot hold (DuckDB's ``infinity``,
    years beyond 1-9999) is the query's problem, said as one (exit 2), not an internal error."""
    try:
        return result.to_pylist()
    except (OverflowError, ValueError) as exc:
        from lakepub.errors import QueryError

        bad = [name for name in result.column_names if _fails(result, name)]
        where = f"column {', '.join(bad)}" if bad else "a column"
        raise QueryError(f"query failed: {where} holds a value Python cannot represent ({exc}); "
                         f"CAST it to VARCHAR in the query to see it as DuckDB prints it") from exc


def _fails(result: Any, name: str) -> bool:
    try:
        result.column(name).to_pylist()
        return False
    except (OverflowError, ValueError):
        return True


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=_default, sort_keys=True)
    return str(value)


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def vector(value: dict[str, int]) -> str:
    return json.dumps(value, sort_keys=True)
