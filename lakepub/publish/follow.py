"""``lakepub run --follow``: one warm process publishing the landing folder as it grows.

A scheduler's ``lakepub run`` pays a new process per run: imports, opening the catalog, loading
the tables and (on an object store) the key index from the cache. Following keeps all of it
(one ``Workspace``: its publishers with their tables, last published rows and DuckDB
connection; the index runs in the page cache) and runs ``Workspace.run`` every ``interval``
seconds, publishing whatever the landing source holds past the committed position.

Stopping: SIGTERM or SIGINT (Ctrl-C) only sets a flag. ``Workspace.run`` checks it before each
batch, so a batch that has started publishing (its files written, its commit under way) is
always finished, and no further batch is started: the process exits 0 with everything it
published committed, and the next ``lakepub run`` starts exactly after it. A second signal does
not interrupt a commit either (the handler stays installed until the loop ends). A failing
publish ends the loop with its error and exit code, as ``lakepub run`` does; the supervisor
(systemd, Kubernetes) restarts the process.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from lakepub.publish.publisher import PublishResult
    from lakepub.workspace import RunResult, Workspace

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class FollowResult:
    """What a follow loop published before it stopped."""

    dataset: str
    cycles: int = 0
    batches: int = 0
    events: int = 0
    stopped_by: str | None = None  # the signal's name
    end: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "cycles": self.cycles, "batches": self.batches, "events": self.events,
                "stopped_by": self.stopped_by, "end": self.end}


class StopFlag:
    """Set by SIGTERM/SIGINT while installed (``with StopFlag() as stop``); the previous handlers
    are restored on exit. Outside the main thread no handler is installed (``set`` it directly)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self, name: str = "request") -> None:
        self.signal_name = self.signal_name or name
        self._event.set()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.set(signal.Signals(signum).name)

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def follow(ws: "Workspace", dataset: str, *, interval: float, stop: StopFlag, landing: Path | None = None,
           max_batch: int = 100_000, on_batch: Callable[["PublishResult", int], None] | None = None,
           on_cycle: Callable[["RunResult"], None] | None = None) -> FollowResult:
    """Run ``ws.run(dataset)`` every ``interval`` seconds until ``stop`` is set (checked between
    batches and while waiting). Returns what was published."""
    out = FollowResult(dataset)
    while not stop.is_set():
        started = time.monotonic()
        result = ws.run(dataset, landing=landing, max_batch=max_batch, on_batch=on_batch, stop=stop.is_set)
        out.cycles += 1
        out.batches += len(result.batches)
        out.events += result.events
        out.end = result.end
        if on_cycle is not None:
            on_cycle(result)
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
    out.stopped_by = stop.signal_name
    return out
