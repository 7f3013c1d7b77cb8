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
    if fmt == "json":
        return to_json(result.to_pylist())
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(result.column_names)
        for row in result.to_pylist():
            writer.writerow([_cell(v) for v in row.values()])
        return buf.getvalue().rstrip("\n")
    rows = [list(r.values()) for r in result.to_pylist()]
    return table(result.column_names, rows) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"


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
