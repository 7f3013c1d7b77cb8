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
"""

from __future__ import annotations


class LakepubError(Exception):
    """Root of every error lakepub raises on purpose; ``exit_code`` is the CLI's exit status."""

    exit_code = 1

    def one_line(self) -> str:
        """The message as a single line, for the CLI."""
        return " ".join(str(self).split())


# --- user errors (exit 2) -------------------------------------------------------------------


class UserError(LakepubError):
    exit_code = 2


class ConfigError(UserError):
    """lakepub.yaml or a catalog definition is missing or malformed."""


class InvalidEvent(UserError):
    """An input event is malformed; names the file, line (or row) and field."""

    def __init__(self, where: str, field: str, problem: str):
        self.where, self.field, self.problem = where, field, problem
        super().__init__(f"invalid event at {where}: field '{field}' {problem}")


class InvalidPosition(UserError):
    """A position vector is malformed or inconsistent with the batch."""


class QueryError(UserError):
    """A read query failed (SQL error, unknown table or column)."""


class UnknownDataset(UserError):
    """The dataset is not defined in the workspace catalog."""


class DefinitionChanged(ConfigError):
    """A dataset definition disagrees with the tables already published for it."""

    def __init__(self, path: object, key: str, published: object, new: object, advice: str):
        self.path, self.key, self.published, self.new = path, key, published, new
        super().__init__(f"{path}: '{key}' is {new!r} but the published tables have {published!r}; {advice}")


class SumOverflow(UserError):
    """A day's total cents would leave the published table's 64-bit integer range."""

    def __init__(self, dataset: str, day: object, partition: str, cents: int):
        self.dataset, self.day, self.partition, self.cents = dataset, day, partition, cents
        super().__init__(
            f"sum overflow in dataset '{dataset}': day {day} (partition {partition}) would total {cents} cents, "
            f"beyond the int64 range of the published table's cents column (max {2 ** 63 - 1}); nothing was "
            "published. Check the batch for wrong cents values (e.g. a unit mix-up) and publish it corrected"
        )


# --- blocked by the protocol (exit 3) -------------------------------------------------------


class BlockedError(LakepubError):
    exit_code = 3


class PayloadConflict(BlockedError):
    """The same (key, version) arrived with a different payload."""

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


# --- failed, safe to retry (exit 4) ---------------------------------------------------------


class RetryableError(LakepubError):
    exit_code = 4


class CommitContention(RetryableError):
    """Every commit attempt lost the race to a concurrent writer; nothing was published."""


class CatalogBusy(RetryableError):
    """The catalog database stayed locked by another connection past its busy timeout."""


class DiskFull(RetryableError):
    """A write failed for lack of space (ENOSPC, EDQUOT) before the commit; nothing was published."""


# --- outcome unknown (exit 5) ---------------------------------------------------------------


class OutcomeUnknown(LakepubError):
    exit_code = 5


# --- verification (exit 1) ------------------------------------------------------------------


class VerifyFailed(LakepubError):
    exit_code = 1


class CorruptTable(LakepubError):
    """A table's metadata JSON, manifest list or manifest cannot be parsed; names the file."""

    exit_code = 1

    def __init__(self, location: str, problem: str):
        self.location = location
        super().__init__(f"corrupt Iceberg file {location}: {problem}")


def _vec(vector: dict[str, int]) -> str:
    inner = ", ".join(f'"{k}": {v}' for k, v in sorted(vector.items()))
    return "{" + inner + "}"
