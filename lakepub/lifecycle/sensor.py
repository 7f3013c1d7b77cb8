"""``lakepub wait``: a sensor for schedulers (Airflow/Dagster sensors, cron chains).

Polls the dataset's state (``state.py``: one catalog load and a walk over snapshot summaries, a
few ms) every ``interval`` until it holds what was asked, then returns it:

* no partition: the dataset has a published snapshot (at ``data_version`` when given);
* ``partition``: the partition has been published (a publish recorded its checksum; a partition
  emptied by deletes counts, its ``empty`` flag says so), at ``data_version`` when given: the
  data version of the snapshot that last rewrote that partition.

A data version is matched exactly or by a prefix of at least 8 hex digits (``sha256:`` optional).
On timeout ``WaitTimedOut`` (exit 6, distinct from every other outcome: 4 means a failed write
safe to retry, 3 a refusal) says what was seen last. A retired dataset is refused at once
(exit 3: it will not be published until restored), and a partition label that cannot be one of
the dataset's (``2026-1-5`` for day partitions) is refused with exit 2 rather than waited for;
``null`` (the partition of rows whose source value is null, as ``state`` lists it) is one.
A ``--data-version`` that cannot match any (not hex, fewer than 8 digits) is exit 2 as well.

Invariant: exit 0 only after a poll read the catalog's current pointer and found the condition;
the state returned is that poll's. ``clock`` and ``sleep`` are parameters so tests need not wait.
"""

from __future__ import annotations

import re
import time
from typing import Callable

from lakepub.errors import LakepubError, UserError
from lakepub.lifecycle.retirement import check_not_retired
from lakepub.lifecycle.state import DatasetState, dataset_state

TIMEOUT_EXIT = 6
NULL_LABEL = "null"  # the label of a null partition value, whatever the transform
_LABELS = {"year": r"\d{4}", "month": r"\d{4}-\d{2}", "day": r"\d{4}-\d{2}-\d{2}", "bucket": r"\d+", "none": "all"}


class WaitTimedOut(LakepubError):
    """``lakepub wait`` gave up: the condition did not hold within the timeout (exit 6)."""

    exit_code = TIMEOUT_EXIT
    kind = "timeout"


def matches(have: str | None, want: str | None) -> bool:
    """``have`` is the data version ``want`` names (exact, or a prefix of >= 8 hex digits)."""
    if want is None:
        return True
    if have is None:
        return False
    h, w = have.removeprefix("sha256:"), want.strip().removeprefix("sha256:")
    return h == w or (len(w) >= 8 and h.startswith(w))


def check_label(ws, dataset: str, partition: str) -> None:
    """Refuse (exit 2) a label that no partition of the dataset can have."""
    spec = ws.config.definition(dataset)
    kind = spec.partition.kind
    pattern = _LABELS.get(kind)
    if kind != "none" and partition == NULL_LABEL:
        return  # the partition of rows whose source value is null (``PartitionBy.label``)
    if pattern is not None and not re.fullmatch(pattern, partition):
        example = {"year": "2026", "month": "2026-01", "day": "2026-01-05", "bucket": "3", "none": "all"}[kind]
        raise UserError(f"--partition: {partition!r} cannot be a partition of {dataset} (partitioned by "
                        f"{spec.partition}; labels look like {example!r})")


_DATA_VERSION = re.compile(r"(sha256:)?[0-9a-f]{8,64}")


def check_data_version(want: str) -> None:
    """Refuse (exit 2) a ``--data-version`` that no data version can match (``matches``): data
    versions are ``sha256:`` and 64 hex digits, matched exactly or by >= 8 of them."""
    if not _DATA_VERSION.fullmatch(want.strip()):
        raise UserError(f"--data-version: {want!r} can never match: give a data version as `lakepub state` shows it "
                        "(sha256:<64 hex digits>) or a prefix of at least 8 of its hex digits")


def satisfied(state: DatasetState, partition: str | None, data_version: str | None) -> bool:
    if state.readiness not in ("published", "foreign-head"):
        return False
    if partition is None:
        return matches(state.data_version, data_version)
    found = state.partition(partition)
    return found is not None and matches(found.data_version, data_version)


def check_wait(ws, dataset: str, partition: str | None, data_version: str | None) -> None:
    """Refuse (exit 2) what no wait can satisfy: an unknown dataset, a label it cannot have, a
    data version nothing matches (``lakepub wait`` checks before it says what it waits for)."""
    ws.config.definition(dataset)
    if partition is not None:
        check_label(ws, dataset, partition)
    if data_version is not None:
        check_data_version(data_version)


def describe_wait(dataset: str, partition: str | None, data_version: str | None) -> str:
    what = f"partition {partition} of {dataset}" if partition is not None else dataset
    return what + (f" at data version {data_version}" if data_version else "")


def wait_for(ws, dataset: str, *, partition: str | None = None, data_version: str | None = None,
             timeout_s: float = 1800.0, interval_s: float = 5.0,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
             on_poll: Callable[[DatasetState, float], None] | None = None) -> DatasetState:
    """Poll until the condition holds (its state) or ``timeout_s`` passed (WaitTimedOut)."""
    check_wait(ws, dataset, partition, data_version)
    deadline = clock() + timeout_s
    while True:
        state = dataset_state(ws, dataset)
        if state.readiness in ("retired", "deleting"):
            check_not_retired(ws._summary_table(dataset), dataset, "waiting for it")  # noqa: SLF001
        if satisfied(state, partition, data_version):
            return state
        left = deadline - clock()
        if on_poll is not None:
            on_poll(state, max(0.0, left))
        if left <= 0:
            raise WaitTimedOut(f"timed out after {_seconds(timeout_s)} waiting for "
                               f"{describe_wait(dataset, partition, data_version)}; last seen: {_seen(state, partition)}")
        sleep(min(interval_s, left))


def _seen(state: DatasetState, partition: str | None) -> str:
    if state.fingerprint is None:
        return "never published"
    found = state.partition(partition) if partition is not None else None
    if partition is not None and found is None:
        return f"snapshot {state.fingerprint}, partition {partition} not published"
    version = found.data_version if found is not None else state.data_version
    return f"snapshot {state.fingerprint} at data version {version}"


def _seconds(s: float) -> str:
    return f"{s:g} s"

