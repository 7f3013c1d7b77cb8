"""The canonical form of a contract and its sha256: what a publish records as the contract's identity.

The label ``contracts/orders@v1.0`` says which version a producer meant; the hash says what that
version contained when the batch was published, so a file edited in place under the same label
shows up as a different hash on the snapshots (``lakepub.contract-sha256``).

Canonical form: the contract as parsed, as JSON with sorted keys, no whitespace, UTF-8, where

* every field is a mapping ``{type, nullable, ...}`` with its type spelt canonically
  (``decimal( 18 ,2)`` -> ``decimal(18,2)``; ``x: string`` and ``x: {type: string}`` are the same),
  in declaration order (the order is the events' column order);
* keys left at their default are omitted, so adding a new optional section to lakepub does not
  change the hash of contracts that do not use it, and writing a default out does not either;
* comments, quoting, key order and YAML spelling (``version: 1.0`` vs ``"1.0"``) do not count.

Cost: one pydantic dump and one sha256 per contract load (~0.1 ms for the orders contract).
"""

from __future__ import annotations

import json
from typing import Any, Iterable


def canonical_form(raw: Any, fields: Iterable[Any]) -> dict[str, Any]:
    """``raw``: the parsed contract file model; ``fields``: its ``FieldSpec``s in order."""
    doc = raw.model_dump(mode="json", exclude_defaults=True, exclude={"fields"})
    doc["name"], doc["version"] = raw.name, raw.version
    doc["fields"] = [_field(f) for f in fields]
    return doc


def _field(f: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f.name, "type": f.type.name, "nullable": f.nullable}
    for key in ("description", "unit", "time_meaning", "timezone"):
        if getattr(f, key):
            out[key] = getattr(f, key)
    if f.deprecated:
        out["deprecated"] = True
    if f.default is not None:
        out["default"] = {"value": _plain(f.default.value), "kind": f.default.kind}
    return out


def _plain(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def canonical_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
