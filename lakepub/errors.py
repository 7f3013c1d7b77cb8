"""One root error class, grouped in families that map to CLI exit codes.

The families separate what a caller should do next:

* ``UserError`` (exit 2): the input or configuration is wrong; fix it, nothing was written.
* ``BlockedError`` (exit 3): the protocol refused the batch (payload conflict, stale start, a
  strict publish gate).
  Nothing was published; retrying the same batch will be refused again.
* ``RetryableError`` (exit 4): failed, nothing published, safe to retry as is (commit contention,
  a catalog database locked past its busy timeout, a full disk before the commit).
* ``OutcomeUnknown`` (exit 5): the commit may or may not have landed. Retrying the same batch
  is still safe (it is recognised as already published), but check ``lakepub log`` first.
* ``VerifyFailed`` (exit 1): a published partition does not match its recorded checksum.
* ``CorruptTable`` (exit 1): a table's metadata JSON, manifest list or manifest cannot be read;
  the message names the file.

``lakepub.failures.classify`` maps foreign exceptions (OS, SQLAlchemy, pyiceberg) onto these.

Each family has a ``kind`` (``invalid_input``, ``refused``, ``retry``, ``outcome_unknown``,
``verify_failed``, ``corrupt_table``, ``failed``) and every error its structured ``details()``
(file, line, field, key, dataset... where it knows them): ``--format json`` prints them
(``lakepub.cli_support``). The attributes are parsed from the message only where the raise sites
have always put them there (a ConfigError's leading ``<file>: '<key>'``).
"""

from __future__ import annotations

import re

# Patterns, compiled on first use (re caches them): importing the errors costs no regex compilation.
_CONFIG_WHERE = (r"^(?P<file>[^\s:][^:]*?\.ya?ml): (?:unknown key )?(?:'(?P<key>[^']+)')?")
_EVENT_WHERE = r"^(?P<file>.*?)(?::(?P<line>\d+)| row (?P<row>\d+)| record (?P<record>\d+))?$"


class LakepubError(Exception):
    """Root of every error lakepub raises on purpose; ``exit_code`` is the CLI's exit status and
    ``kind`` its family's name in JSON errors."""

    exit_code = 1
    kind = "failed"
    #: attribute names ``details()`` reports when they are set (not None)
    detail_fields: tuple[str, ...] = ()

    def one_line(self) -> str:
        """The message as a single line, for the CLI."""
        return " ".join(str(self).split())

    def details(self) -> dict[str, object]:
        """The structured facts this error knows (file, line, field, ...), for JSON errors."""
        return {name: getattr(self, name) for name in self.detail_fields if getattr(self, name, None) is not None}


# --- user errors (exit 2) -------------------------------------------------------------------


class UserError(LakepubError):
    """Invalid input or configuration (exit 2): fix it and run again; nothing was written."""

    exit_code = 2
    kind = "invalid_input"


class ConfigError(UserError):
    """lakepub.yaml or a catalog definition is missing or malformed.

    ``file`` and ``key`` are the YAML file and key path the message starts with
    (``<file>: '<key>' ...``), None when it names none."""

    detail_fields = ("file", "key")

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        super().__init__(message)
        found = re.match(_CONFIG_WHERE, message)
        self.file = file if file is not None else (found.group("file") if found else None)
        self.key = key if key is not None else (found.group("key") if found else None)


class InvalidEvent(UserError):
    """An input event is malformed; names the file, line (or row) and field.

    ``file``, ``line`` (a JSON Lines line), ``row`` (a Parquet or Arrow row) or ``record`` (an
    item of a Python iterable), and ``field`` (None when the problem is not one field's)."""

    detail_fields = ("file", "line", "row", "record", "field")

    def __init__(self, where: str, field: str, problem: str):
        self.where, self.problem = where, problem
        super().__init__(f"invalid event at {where}: field '{field}' {problem}")
        parts = re.match(_EVENT_WHERE, where)
        self.file = parts.group("file") if parts else where
        self.line, self.row, self.record = (int(parts.group(g)) if parts and parts.group(g) else None
                                            for g in ("line", "row", "record"))
        self.field = None if field == "-" else field


class InvalidPosition(UserError):
    """A position vector is malformed or inconsistent with the batch."""


class QueryError(UserError):
    """A read query failed (SQL error, unknown table or column)."""


class UnknownDataset(UserError):
    """The dataset is not defined in the workspace catalog (``dataset``: the name asked for)."""

    detail_fields = ("dataset",)

    def __init__(self, message: str):
        super().__init__(message)
        found = re.match(r"unknown dataset '([^']*)'", message)
        self.dataset = found.group(1) if found else None


class DefinitionChanged(ConfigError):
    """A dataset definition disagrees with the tables already published for it."""

    detail_fields = ("file", "key", "published", "new")

    def __init__(self, path: object, key: str, published: object, new: object, advice: str):
        super().__init__(f"{path}: '{key}' is {new!r} but the published tables have {published!r}; {advice}",
                         file=str(path), key=key)
        self.path, self.published, self.new = path, published, new


class SumOverflow(UserError):
    """A day's total cents would leave the published table's 64-bit integer range."""

    detail_fields = ("dataset", "partition")

    def __init__(self, dataset: str, day: object, partition: str, cents: int):
        self.dataset, self.day, self.partition, self.cents = dataset, day, partition, cents
        super().__init__(
            f"sum overflow in dataset '{dataset}': day {day} (partition {partition}) would total {cents} cents, "
            f"beyond the int64 range of the published table's cents column (max {2 ** 63 - 1}); nothing was "
            "published. Check the batch for wrong cents values (e.g. a unit mix-up) and publish it corrected"
        )


# --- blocked by the protocol (exit 3) -------------------------------------------------------


class BlockedError(LakepubError):
    """Refused by the protocol (exit 3); nothing was published, and the same batch would be
    refused again."""

    exit_code = 3
    kind = "refused"


class PayloadConflict(BlockedError):
    """The same (key, version) arrived with a different payload."""

    detail_fields = ("key", "version")

    def __init__(self, key: str, version: int, detail: str = "", key_name: str = "order_id"):
        self.order_id = self.key = key
        self.version = version
        suffix = f" ({detail})" if detail else ""
        shown = f"{key_name}={key!r}" if key_name else f"key ({key})"
        super().__init__(
            f"payload conflict: {shown} version={version} already has a different payload{suffix}; "
            "nothing was published"
        )


class StaleStart(BlockedError):
    """The batch does not start where the committed position vector of its source ends."""

    detail_fields = ("source", "start", "committed")

    def __init__(self, source: str, start: dict[str, int], committed: dict[str, int], note: str = ""):
        self.source, self.start, self.committed = source, start, committed
        super().__init__(
            f"stale start for source '{source}': batch starts at {_vec(start)} "
            f"but the committed position is {_vec(committed)}; nothing was published" + (f" ({note})" if note else "")
        )


class GateRefused(BlockedError):
    """A ``validation.mode: strict`` contract's constraint rejected events of the batch (or a
    ``units`` promise of the contract is broken): nothing was published (``contract/gates.py``)."""


class ForeignChange(BlockedError):
    """The published table's current snapshot was written outside lakepub and changed its data
    (or its partitioning): building on it would publish data lakepub cannot vouch for."""


class UndecodableManifests(BlockedError):
    """A table's manifests are Avro in a codec DuckDB (lakepub's reader) cannot decode: a writer
    followed a ``write.avro.compression-codec`` other than gzip/deflate or null (e.g. zstandard
    set on the table by another tool). Nothing is read wrongly; the command cannot read at all."""


class IncompatibleContract(BlockedError):
    """A dataset names a contract version that is not a compatible evolution of the one its
    published tables were written for (``publish/evolution.py``): the file is valid, the published
    tables cannot take it; a breaking version is published as a new dataset beside the old one."""

    detail_fields = ("file", "key")

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        super().__init__(message)
        self.file, self.key = file, key


# --- failed, safe to retry (exit 4) ---------------------------------------------------------


class RetryableError(LakepubError):
    """Failed, nothing published, safe to retry as is (exit 4)."""

    exit_code = 4
    kind = "retry"


class CommitContention(RetryableError):
    """Every commit attempt lost the race to a concurrent writer; nothing was published."""


class CatalogBusy(RetryableError):
    """The catalog database stayed locked by another connection past its busy timeout."""


class DiskFull(RetryableError):
    """A write failed for lack of space (ENOSPC, EDQUOT) before the commit; nothing was published."""


# --- outcome unknown (exit 5) ---------------------------------------------------------------


class OutcomeUnknown(LakepubError):
    """The commit may or may not have landed (exit 5): check ``lakepub log``, then retry."""

    exit_code = 5
    kind = "outcome_unknown"


# --- verification (exit 1) ------------------------------------------------------------------


class VerifyFailed(LakepubError):
    """A published partition does not match its recorded checksum (exit 1)."""

    exit_code = 1
    kind = "verify_failed"


class CorruptTable(LakepubError):
    """A table's metadata JSON, manifest list or manifest cannot be parsed; names the file."""

    exit_code = 1
    kind = "corrupt_table"
    detail_fields = ("file",)

    def __init__(self, location: str, problem: str):
        self.location = self.file = location
        super().__init__(f"corrupt Iceberg file {location}: {problem}")


def _vec(vector: dict[str, int]) -> str:
    inner = ", ".join(f'"{k}": {v}' for k, v in sorted(vector.items()))
    return "{" + inner + "}"
