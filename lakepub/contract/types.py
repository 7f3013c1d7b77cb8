"""The field types a contract may declare, and what each is in Arrow and in Iceberg.

``string, int, long, float, double, boolean, date, timestamp, decimal(p,s)``: a closed list, so a
typo (``banana``, ``varchar``) is a definition error naming the file and the key, never a column
silently read as something else. ``timestamp`` is UTC with microseconds (Iceberg ``timestamptz``).
Entity keys may be ``string, int, long, date`` (values with one exact, canonical encoding).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.types import (
    BooleanType, DateType, DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType, StringType,
    TimestamptzType,
)

_SIMPLE: dict[str, tuple[pa.DataType, IcebergType]] = {
    "string": (pa.string(), StringType()),
    "int": (pa.int32(), IntegerType()),
    "long": (pa.int64(), LongType()),
    "float": (pa.float32(), FloatType()),
    "double": (pa.float64(), DoubleType()),
    "boolean": (pa.bool_(), BooleanType()),
    "date": (pa.date32(), DateType()),
    "timestamp": (pa.timestamp("us", tz="UTC"), TimestamptzType()),
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
TYPE_NAMES = (*_SIMPLE, "decimal(p,s)")
KEY_TYPES = ("string", "int", "long", "date")
INTEGER_TYPES = ("int", "long")


@dataclass(frozen=True)
class FieldType:
    """One declared type: ``name`` is its canonical spelling (``decimal(18,2)``)."""

    name: str
    precision: int | None = None
    scale: int | None = None

    @classmethod
    def parse(cls, text: str) -> "FieldType":
        """Raise ValueError with the accepted spellings if ``text`` is not a type."""
        spelled = " ".join(str(text).split()).lower()
        if spelled in _SIMPLE:
            return cls(spelled)
        m = _DECIMAL.match(spelled)
        if m:
            precision, scale = int(m.group(1)), int(m.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(f"decimal({precision},{scale}) needs 1 <= precision <= 38 and scale <= precision")
            return cls(f"decimal({precision},{scale})", precision, scale)
        raise ValueError(f"unknown type {text!r} (one of: {', '.join(TYPE_NAMES)})")

    @property
    def kind(self) -> str:
        """The name without parameters: ``decimal`` for every decimal."""
        return "decimal" if self.precision is not None else self.name

    @property
    def arrow(self) -> pa.DataType:
        if self.kind == "decimal":
            return pa.decimal128(self.precision, self.scale)
        return _SIMPLE[self.name][0]

    @property
    def iceberg(self) -> IcebergType:
        if self.kind == "decimal":
            return DecimalType(self.precision, self.scale)
        return _SIMPLE[self.name][1]

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("int", "long", "float", "double", "decimal")

    def __str__(self) -> str:
        return self.name
