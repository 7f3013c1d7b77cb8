"""Move an Iceberg workspace written under one absolute folder to another (test fixtures only).

Iceberg stores absolute ``file://`` locations: the SQL catalog's rows (``metadata_location``,
``previous_metadata_location``), every metadata JSON (``location``, manifest-list paths,
``metadata-log``), every manifest list (``manifest_path``) and every manifest (``file_path``).
Plain byte replacement is not enough: pyiceberg writes its Avro files with the ``deflate``
codec, so their paths are inside compressed blocks, and a manifest list records the byte length
of each manifest (``manifest_length``; Java Iceberg and DuckDB may trust it as the file size),
which changes when the rewritten manifest is compressed again.

So each kind of file is rewritten by what it is:

* SQLite catalog: ``UPDATE ... SET col = replace(col, old, new)`` on every text column;
* JSON / text files: text replacement;
* Avro container files: blocks decompressed, records decoded with the file's own schema,
  every string re-rooted, ``manifest_length`` set to the rewritten manifest's real size,
  encoded and compressed again; the header (schema, metadata, sync marker) is kept as it is.
  The decoder is checked on every block: encoding the decoded records must give back the
  original bytes exactly, so nothing but the paths and lengths can change;
* Parquet data files and Arrow IPC key-index runs hold no paths (their schemas have no path
  column); they are only checked not to contain the old root.

The new root may have any length (nothing relies on same-length replacement).
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import struct
import zlib
from pathlib import Path

_MAGIC = b"Obj\x01"


# --- Avro binary encoding ------------------------------------------------------------------


def _read_long(buf: io.BytesIO) -> int:
    shift = result = 0
    while True:
        byte = buf.read(1)
        if not byte:
            raise EOFError("truncated Avro varint")
        b = byte[0]
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1)


def _write_long(out: io.BytesIO, n: int) -> None:
    n = (n << 1) ^ (n >> 63)
    while n & ~0x7F:
        out.write(bytes([(n & 0x7F) | 0x80]))
        n >>= 7
    out.write(bytes([n]))


class _Codec:
    """Decode/encode Avro values by a parsed schema (all types but the logical ones, which are
    their underlying types here)."""

    def __init__(self, schema: object):
        self.named: dict[str, object] = {}
        self.schema = self._register(schema)

    def _register(self, s: object) -> object:
        if isinstance(s, dict):
            if s.get("type") in ("record", "enum", "fixed") and "name" in s:
                self.named[s["name"]] = s
            if s.get("type") == "record":
                for f in s["fields"]:
                    f["type"] = self._register(f["type"])
            elif s.get("type") == "array":
                s["items"] = self._register(s["items"])
            elif s.get("type") == "map":
                s["values"] = self._register(s["values"])
        elif isinstance(s, list):
            return [self._register(x) for x in s]
        return s

    def _resolve(self, s: object) -> object:
        return self.named[s] if isinstance(s, str) and s in self.named else s

    def read(self, s: object, buf: io.BytesIO) -> object:  # noqa: C901, PLR0911
        s = self._resolve(s)
        if isinstance(s, list):
            branch = _read_long(buf)
            return (branch, self.read(s[branch], buf))
        t = s["type"] if isinstance(s, dict) else s
        if isinstance(t, (dict, list)):
            return self.read(t, buf)
        if t == "null":
            return None
        if t == "boolean":
            return buf.read(1) != b"\x00"
        if t in ("int", "long"):
            return _read_long(buf)
        if t == "float":
            return buf.read(4)  # kept as bytes: re-encoded bit for bit
        if t == "double":
            return buf.read(8)
        if t == "bytes":
            return buf.read(_read_long(buf))
        if t == "string":
            return buf.read(_read_long(buf)).decode("utf-8")
        if t == "fixed":
            return buf.read(s["size"])
        if t == "enum":
            return _read_long(buf)
        if t == "record":
            return {f["name"]: self.read(f["type"], buf) for f in s["fields"]}
        if t in ("array", "map"):
            items = []
            while True:
                n = _read_long(buf)
                if n == 0:
                    return items
                if n < 0:
                    n = -n
                    _read_long(buf)  # block size in bytes
                for _ in range(n):
                    if t == "map":
                        items.append((buf.read(_read_long(buf)).decode("utf-8"), self.read(s["values"], buf)))
                    else:
                        items.append(self.read(s["items"], buf))
        if t in self.named:
            return self.read(self.named[t], buf)
        raise ValueError(f"unsupported Avro type {t!r}")

    def write(self, s: object, value: object, out: io.BytesIO) -> None:  # noqa: C901, PLR0912
        s = self._resolve(s)
        if isinstance(s, list):
            branch, inner = value
            _write_long(out, branch)
            self.write(s[branch], inner, out)
            return
        t = s["type"] if isinstance(s, dict) else s
        if isinstance(t, (dict, list)):
            self.write(t, value, out)
        elif t == "null":
            pass
        elif t == "boolean":
            out.write(b"\x01" if value else b"\x00")
        elif t in ("int", "long", "enum"):
            _write_long(out, value)
        elif t in ("float", "double", "fixed"):
            out.write(value)
        elif t in ("bytes", "string"):
            raw = value.encode("utf-8") if t == "string" else value
            _write_long(out, len(raw))
            out.write(raw)
        elif t == "record":
            for f in s["fields"]:
                self.write(f["type"], value[f["name"]], out)
        elif t in ("array", "map"):
            if value:
                _write_long(out, len(value))
                for item in value:
                    if t == "map":
                        key = item[0].encode("utf-8")
                        _write_long(out, len(key))
                        out.write(key)
                        self.write(s["values"], item[1], out)
                    else:
                        self.write(s["items"], item, out)
            _write_long(out, 0)
        elif t in self.named:
            self.write(self.named[t], value, out)
        else:
            raise ValueError(f"unsupported Avro type {t!r}")


def _decompress(codec: str, data: bytes) -> bytes:
    if codec == "null":
        return data
    if codec == "deflate":
        return zlib.decompress(data, -15)
    raise ValueError(f"unsupported Avro codec {codec!r}")


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "null":
        return data
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def _avro_parts(raw: bytes) -> tuple[bytes, dict[str, bytes], bytes, list[tuple[int, bytes]]]:
    """(header bytes, header metadata, sync marker, [(record count, decompressed block)])."""
    buf = io.BytesIO(raw)
    if buf.read(4) != _MAGIC:
        raise ValueError("not an Avro container file")
    meta: dict[str, bytes] = {}
    while True:
        n = _read_long(buf)
        if n == 0:
            break
        if n < 0:
            n = -n
            _read_long(buf)
        for _ in range(n):
            key = buf.read(_read_long(buf)).decode("utf-8")
            meta[key] = buf.read(_read_long(buf))
    sync = buf.read(16)
    header = raw[: buf.tell()]
    codec = meta.get("avro.codec", b"null").decode()
    blocks = []
    while buf.tell() < len(raw):
        count = _read_long(buf)
        data = buf.read(_read_long(buf))
        if buf.read(16) != sync:
            raise ValueError("Avro sync marker mismatch")
        blocks.append((count, _decompress(codec, data)))
    return header, meta, sync, blocks


def avro_records(raw: bytes) -> list[object]:
    """Every record of an Avro container file, decoded (for tests and diagnostics)."""
    _, meta, _, blocks = _avro_parts(raw)
    codec = _Codec(json.loads(meta["avro.schema"]))
    out = []
    for count, data in blocks:
        buf = io.BytesIO(data)
        out.extend(codec.read(codec.schema, buf) for _ in range(count))
    return out


def rewrite_avro(raw: bytes, old: str, new: str, lengths: dict[str, int]) -> bytes:
    """``raw`` with every string starting a path under ``old`` re-rooted under ``new``, and every
    ``manifest_length`` of a manifest whose (new) path is in ``lengths`` set to that length."""
    header, meta, sync, blocks = _avro_parts(raw)
    codec_name = meta.get("avro.codec", b"null").decode()
    if old.encode() in header:
        raise ValueError("an Avro header names the old root; this relocation does not handle it")
    codec = _Codec(json.loads(meta["avro.schema"]))

    def fix(value: object) -> object:
        if isinstance(value, str):
            return value.replace(old, new)
        if isinstance(value, dict):
            out = {k: fix(v) for k, v in value.items()}
            path = out.get("manifest_path")
            if isinstance(path, str) and path in lengths:
                out["manifest_length"] = lengths[path]
            return out
        if isinstance(value, tuple):
            return tuple(fix(v) for v in value)
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    out = io.BytesIO()
    out.write(header)
    for count, data in blocks:
        buf = io.BytesIO(data)
        records = [codec.read(codec.schema, buf) for _ in range(count)]
        if buf.tell() != len(data):
            raise ValueError("Avro block not fully decoded")
        check = io.BytesIO()
        for r in records:
            codec.write(codec.schema, r, check)
        if check.getvalue() != data:
            raise ValueError("Avro records do not re-encode to their original bytes; cannot rewrite safely")
        block = io.BytesIO()
        for r in records:
            codec.write(codec.schema, fix(r), block)
        packed = _compress(codec_name, block.getvalue())
        _write_long(out, count)
        _write_long(out, len(packed))
        out.write(packed)
        out.write(sync)
    return out.getvalue()


# --- the whole workspace --------------------------------------------------------------------


def leftovers(root: Path, old: str) -> list[str]:
    """Files under ``root`` that still name ``old`` (Avro files are looked into: their blocks are
    compressed), and manifest lists whose ``manifest_length`` is not the manifest's real size."""
    bad = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        if old.encode() in raw:
            bad.append(str(path))
        elif raw.startswith(_MAGIC):
            for record in avro_records(raw):
                if old in json.dumps(record, default=repr):
                    bad.append(str(path))
                    break
                if isinstance(record, dict) and "manifest_path" in record:
                    manifest = Path(record["manifest_path"].removeprefix("file://"))
                    if not manifest.is_file() or manifest.stat().st_size != record["manifest_length"]:
                        bad.append(f"{path}: manifest_length of {manifest}")
    return bad


def _is_manifest_list(raw: bytes) -> bool:
    _, meta, _, _ = _avro_parts(raw)
    schema = json.loads(meta["avro.schema"])
    return any(f["name"] == "manifest_length" for f in schema.get("fields", []))


def relocate(root: Path, old: str, new: str) -> dict[str, int]:
    """Re-root every absolute location under ``old`` found in the workspace at ``root`` (already
    copied there) to ``new``; return how many files of each kind were rewritten."""
    old_b, new_b = old.encode(), new.encode()
    mtimes = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    done = {"sqlite": 0, "text": 0, "avro": 0, "untouched": 0}
    files = sorted(p for p in root.rglob("*") if p.is_file())
    manifests, lists = [], []
    for path in files:
        raw = path.read_bytes()
        if raw.startswith(b"SQLite format 3\x00"):
            con = sqlite3.connect(path)
            try:
                for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
                    for col in cols:
                        con.execute(f'UPDATE "{table}" SET "{col}" = replace("{col}", ?, ?) '
                                    f'WHERE typeof("{col}") = \'text\'', (old, new))
                con.commit()
                con.execute("VACUUM")  # no old text left in freed pages
            finally:
                con.close()
            done["sqlite"] += 1
        elif raw.startswith(_MAGIC):
            (lists if _is_manifest_list(raw) else manifests).append(path)
        elif old_b in raw:
            path.write_bytes(raw.replace(old_b, new_b))
            done["text"] += 1
        else:
            done["untouched"] += 1
    lengths: dict[str, int] = {}
    for path in manifests + lists:  # manifests first: the lists record their new lengths
        path.write_bytes(rewrite_avro(path.read_bytes(), old, new, lengths))
        lengths[f"file://{path}"] = path.stat().st_size
        done["avro"] += 1
    for path, mtime in mtimes.items():  # file ages matter (landing backlog, the janitor's grace)
        os.utime(path, ns=(mtime, mtime))
    return done
