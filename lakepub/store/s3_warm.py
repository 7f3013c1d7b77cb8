"""What a new process on an S3 warehouse starts in the background before its first publish.

A warm process has its pool threads idle and every module a publish uses imported; a new one
paid both inside its first publish (issue 16: new process <= 1.3x the warm publish). ``start``
(once per process: from ``s3.head_start`` as ``Workspace.publish`` begins, before it reads and
validates the batch; from ``s3.configure`` when the catalog is opened; from the S3 FileIO)
runs them in one daemon thread, while the main thread reads the batch (Arrow's decoding
releases the GIL), opens the catalog, loads its tables and looks the batch up in the key index,
which wait on S3 round trips and the disk:

* the threads of the upload and fetch pools: a pool starts a thread on a submit that finds none
  idle, and ``Thread.start`` waits until the new thread runs; a new process's first publish
  started its ~40 pool threads that way, each start waiting for the GIL behind the Parquet
  encoding of the threads started before it (~0.35 s of a 1M-order publish in a profile).
  Started here they cost ~0.1 ms each;
* the modules a publish imports on first use (``LATE_IMPORTS``, found by diffing ``sys.modules``
  of a new process before and after one publish). Only third-party leaf modules: importing one
  of lakepub's own here, while the main thread may be importing its importers, could meet it
  in a circular import.

Nothing here changes what a publish does or reads: it is a head start only (a failed import is
ignored; the publish imports it again and reports it). It adds no request to the store. A fork
waits for the module being imported, and the child gets new pools and its own head start
(``_before_fork``, ``_after_fork_in_child``).

Measured (``scripts/bench/cold_publish_ab.py``, interleaved with main, S3 +30 ms, on a machine
at load 9-30): the new process's publish, median of 8 pairs at 10M orders, 4.99 -> 3.77 s (CPU
2.02 -> 1.81 s), its ratio to the same process's warm publishes 1.98x -> 1.96x (CPU 2.03x ->
1.65x); at 1M orders (10 pairs) 4.65 -> 3.06 s, 1.78x -> 1.67x. At 10M the wall ratio, which
compares like with like at the same load, is unchanged within the noise (per-process ratios
1.16-2.43 vs 1.35-2.50; the warm publishes, which the head start does not touch, were 2.08 vs
2.42 s in the same pairs), so the lower absolute figures are not all the head start's; how much
is, was not resolved from the load. The target (<= 1.3x) is still missed; README "Where a new
process's extra time goes" has what remains.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

# In the order a publish first needs them: numpy.ma (pa.array of the batch's versions checks for
# a masked array: publish/versioning.py), pyiceberg's fast Avro decoder (the first manifest list
# read), pyiceberg-core's partition transforms (the first partition written) and pyarrow's Acero
# (joins). Not rich: pyiceberg imports it for the error table of its schema check, which a
# publish that rewrites partitions never runs (an empty append, an audit record or a compaction
# does, and imports it then); importing it anyway cost every new process ~45 modules (~40 ms of
# CPU at load 20) beside its publish's own threads. ``tests/test_s3_warm.py`` checks that a new
# process's publishes end with all of these imported and rich not.
LATE_IMPORTS = ("numpy.ma", "pyiceberg.avro.decoder_fast", "pyiceberg_core.transform", "pyarrow.acero")
_SQLITE = ("sqlite3", "sqlalchemy.dialects.sqlite")  # a SQLite catalog's, imported as it opens

_STARTED = threading.Event()
# Held while the head start imports a module; a fork waits for it (``_before_fork``): a child
# forked mid-import would find that module's import lock held by a thread it does not have, and
# its own first import of the module (or use of a lazily imported one, numpy.ma) wait forever.
_IMPORTING = threading.Lock()
_FORK_WAIT_S = 30.0
_HELD_FOR_FORK: list[bool] = []


def start(properties: Mapping[str, str] | None = None) -> None:
    """Start the pool threads and the late imports in the background, once per process; with the
    catalog's ``properties`` of a SQLite catalog, its driver and SQLAlchemy dialect first (what
    opening the catalog imports: ~25 ms of CPU), when called before the catalog is opened."""
    if _STARTED.is_set():
        return
    _STARTED.set()
    first = _SQLITE if str((properties or {}).get("uri", "")).startswith("sqlite") else ()
    threading.Thread(target=_run, args=(first,), name="lakepub-start-threads", daemon=True).start()


def _run(first: tuple[str, ...] = ()) -> None:
    _import(first)
    with _IMPORTING:
        from lakepub.store.cache import _POOL as _RUN_FETCHES
        from lakepub.store.files import _REMOTE_POOL
        from lakepub.store.uploads import _UPLOADS

    try:
        for pool in (_REMOTE_POOL, _UPLOADS, _RUN_FETCHES):
            _fill(pool)
    except RuntimeError:  # the interpreter is exiting: nothing to start
        return
    _import(LATE_IMPORTS)


def _import(modules: tuple[str, ...]) -> None:
    for module in modules:
        with _IMPORTING:
            try:
                importlib.import_module(module)
            except ImportError:  # pragma: no cover - only a head start
                pass


def _before_fork() -> None:
    if _IMPORTING.acquire(timeout=_FORK_WAIT_S):  # (bounded: never let a fork hang on the head start)
        _HELD_FOR_FORK.append(True)


def _after_fork_in_parent() -> None:
    if _HELD_FOR_FORK:
        _HELD_FOR_FORK.clear()
        _IMPORTING.release()


def _after_fork_in_child() -> None:
    """A forked child has the parent's pools as they were (their idle threads counted) but none of
    their threads: a submit that finds an "idle" thread starts none and waits forever. Make lakepub's
    module-level pools new again in the child, and let its own head start run."""
    global _STARTED, _IMPORTING
    _STARTED = threading.Event()
    _IMPORTING = threading.Lock()
    _HELD_FOR_FORK.clear()
    for name, module in list(sys.modules.items()):
        if name == "lakepub" or name.startswith("lakepub."):
            for pool in list(vars(module).values()):
                if type(pool) is ThreadPoolExecutor:
                    ThreadPoolExecutor.__init__(pool, pool._max_workers, pool._thread_name_prefix,  # noqa: SLF001
                                                pool._initializer, pool._initargs)  # noqa: SLF001


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def _fill(pool: ThreadPoolExecutor) -> None:
    """Start every thread of ``pool``."""
    gate = threading.Event()  # every task blocks until all are submitted: one thread each
    futures = []
    try:
        for _ in range(pool._max_workers):  # noqa: SLF001
            futures.append(pool.submit(gate.wait, 1))
    finally:  # (a submit after the interpreter began to exit raises: never leave tasks waiting)
        gate.set()
    for future in futures:
        future.result()
