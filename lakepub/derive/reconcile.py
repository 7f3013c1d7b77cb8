"""``lakepub reconcile``: every pending window of the derived datasets, in graph order.

A routine run computes only what the plan finds missing or stale (plus each dataset's
``lookback``): a dataset's windows all commit before any dataset downstream of it is planned, so
a downstream is planned against its upstreams' new snapshots within the same run. Named datasets
are reconciled with the derived datasets they read (upstreams first), nothing downstream of them.

``workers > 1`` prepares a dataset's windows in a thread pool (query, checksums, data files:
DuckDB and Arrow release the GIL) and commits them one by one in the calling thread as they
complete; windows of one dataset are disjoint, so a commit that lost a race to another process
rebases (``compute.py``). ``window=ID`` computes exactly that window of one dataset (what a job
runner fans out from ``lakepub plan --format json``): an id that is not in the current plan is
refused (exit 3), a window with nothing pending is a no-op.

A rebuild table of a reconciled dataset built for a data version that is neither its published
nor its desired one (its definition changed again, or was reverted, mid-rebuild: ``lakepub plan``
lists it under ``abandoned_rebuilds``) is dropped from the catalog; its folder is then superseded
and the janitor deletes it (``maintenance/superseded.py``). ``--window`` drops nothing.

Cost: one plan per dataset (checksum records only) plus the windows' queries and commits.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

from lakepub.derive.compute import WindowRefused, WindowResult, _check_rebuild_open, commit_window, compute_window, \
    ensure_table, prepare_window
from lakepub.derive.model import upstream_of
from lakepub.derive.state import Batching, Context, DatasetPlan, plan_dataset
from lakepub.errors import CommitContention, UserError

REBUILD_ROUNDS = 3  # a rebuild catches up with inputs that moved while it was built, this many times

OnPlan = Callable[[DatasetPlan], None]
OnWindow = Callable[[WindowResult], None]
OnDrop = Callable[[str, list[str]], None]  # (dataset, the abandoned rebuild tables dropped)


def reconcile(ws, names: list[str] | None = None, *, batching: Batching = Batching(), workers: int = 1,
              window: str | None = None, on_plan: OnPlan | None = None,
              on_window: OnWindow | None = None, on_drop: OnDrop | None = None) -> list[WindowResult]:
    ctx = Context(ws)
    derived = ctx.graph.derived
    for name in names or ():
        if name not in derived:
            ws.config.dataset(name)  # unknown: exit 2
            raise UserError(f"dataset '{name}' is a base dataset: 'lakepub run {name}' publishes it; "
                            "reconcile computes derived datasets (projection.kind: sql)")
    if window is not None:
        return [_one_window(ctx, names or [], window, batching, on_plan, on_window)]
    targets = upstream_of(derived, set(names)) if names else set(derived)
    targets = {n for n in targets if not _retired(ctx, n, named=n in (names or ()))}
    results: list[WindowResult] = []
    pool = None
    try:
        for name in [n for n in ctx.graph.order if n in targets]:
            plan = plan_dataset(ctx, name, batching)
            if on_plan:
                on_plan(plan)
            if plan.blocked:
                raise WindowRefused(f"{derived[name].path}: cannot reconcile {name}: {plan.blocked}; nothing was "
                                    "written for it")
            if plan.abandoned:  # a definition changed again mid-rebuild: that build is of no version
                from lakepub.derive.rebuild import drop_abandoned

                dropped = drop_abandoned(ctx, name, plan.abandoned)
                if on_drop and dropped:
                    on_drop(name, dropped)
            expected = ctx.table(name).metadata_location if plan.rebuild else None
            for round in range(REBUILD_ROUNDS):
                pool = _run_windows(ctx, name, [(w.id, w.pending) for w in plan.pending], workers, pool, results,
                                    on_window, into=plan.rebuild)
                if not plan.rebuild:
                    break
                for upstream in derived[name].inputs:  # inputs may have moved while it was built
                    ctx.forget(upstream)
                # Without listing abandoned rebuild tables: only the first plan's are dropped (the
                # windows just forgot the rebuild table, so a listing would be a catalog query again).
                plan = plan_dataset(ctx, name, batching, abandoned=False)
                if plan.rebuild and not plan.pending:
                    from lakepub.derive.rebuild import finish

                    finish(ctx, name, plan.rebuild, expected, batching)
                    break
                if not plan.rebuild:  # another process swapped it in meanwhile
                    break
                if round == REBUILD_ROUNDS - 1:
                    raise CommitContention(f"{name}: its inputs or its table kept moving while its new data version "
                                           "was built; the rebuild is kept: run 'lakepub reconcile' again")
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return results


def backfill(ws, name: str, first: str, last: str, *, batching: Batching = Batching(), workers: int = 1,
             on_plan: OnPlan | None = None, on_window: OnWindow | None = None) -> list[WindowResult]:
    """Recompute the partitions ``first``..``last`` (labels, inclusive) of ``name`` in place under
    its current data version (inputs repaired), whatever their recorded state; nothing else moves."""
    ctx = Context(ws)
    if name not in ctx.graph.derived:
        ws.config.dataset(name)
        raise UserError(f"dataset '{name}' is a base dataset: backfill recomputes derived datasets")
    _retired(ctx, name, named=True)  # refused (exit 3), as reconcile refuses a retired dataset named
    plan = plan_dataset(ctx, name, batching)
    if on_plan:
        on_plan(plan)
    if plan.blocked:
        raise WindowRefused(f"cannot backfill {name}: {plan.blocked}; nothing was written")
    if plan.change == "breaking":
        raise WindowRefused(f"{name} has a new data version ({'; '.join(plan.reasons)}): a backfill recomputes "
                            "partitions under the published one; run 'lakepub reconcile' to move to the new one")
    for option, label in (("--from", first), ("--to", last)):
        _check_label(ctx.graph.derived[name].partition, name, option, label)
    if first > last:
        raise UserError(f"--from {first} is after --to {last}")
    windows = []
    for w in plan.windows:
        chosen = [label for label in w.partitions if first <= label <= last]
        if chosen:
            windows.append((w.id, chosen))
    if not windows:
        raise WindowRefused(f"no partition of {name} between {first} and {last} (partitions: "
                            f"{plan.windows[0].partitions[0] if plan.windows else 'none'}.."
                            f"{plan.windows[-1].partitions[-1] if plan.windows else ''})")
    results: list[WindowResult] = []
    pool = None
    try:
        pool = _run_windows(ctx, name, windows, workers, None, results, on_window)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return results


_LABEL = {"day": (r"\d{4}-\d{2}-\d{2}", "2025-10-03"), "month": (r"\d{4}-\d{2}", "2025-10"),
          "year": (r"\d{4}", "2025")}


def _check_label(partition, name: str, option: str, label: str) -> None:
    """A ``--from/--to`` label of a day/month/year partitioned dataset must be a label of that grain
    (exit 2): labels compare as strings, so '2025-09-15' on a monthly dataset would skip 2025-09."""
    import re

    from lakepub.derive.state import label_range

    if partition.kind not in _LABEL or label == "null":
        return
    pattern, example = _LABEL[partition.kind]
    try:
        if not re.fullmatch(pattern, label):
            raise ValueError(label)
        label_range(partition.kind, label)
    except ValueError:
        raise UserError(f"{option} {label}: {name} is partitioned by {partition}: give a {partition.kind} partition "
                        f"label (e.g. {example})") from None


def _run_windows(ctx: Context, name: str, windows: list[tuple[str, list[str]]], workers: int, pool,
                 results: list[WindowResult], on_window: OnWindow | None, into: str | None = None):
    """Compute ``windows`` ((id, partitions)) of ``name``, ``workers`` at a time; returns the pool.

    With ``workers > 1`` a thread pool prepares windows (the query, checksums and data files: DuckDB
    and Arrow release the GIL) while this thread commits each prepared window as it completes, one
    at a time: windows of one process never race each other for the table (a lost race costs a
    reload and a re-staged manifest), only other processes' windows can.
    """
    if workers > 1 and len(windows) > 1:
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakepub-window")
        local = threading.local()

        def prepare(labels: list[str], wid: str):
            if not hasattr(local, "ctx"):
                local.ctx = ctx.fork()
            return prepare_window(local.ctx, name, labels, wid, into)

        # The table is created (or re-created after a crash) here once, not by threads racing.
        if into is not None:
            _check_rebuild_open(ctx, name, into, ctx.versions[name].data_version)
        ensure_table(ctx, name, into)
        futures = [pool.submit(prepare, labels, wid) for wid, labels in windows]
        for future in as_completed(futures):
            result = commit_window(ctx, future.result())
            results.append(result)
            if on_window:
                on_window(result)
    else:
        for wid, labels in windows:
            result = compute_window(ctx, name, labels, wid, into)
            results.append(result)
            if on_window:
                on_window(result)
    ctx.forget(into or name)
    return pool


def _one_window(ctx: Context, names: list[str], window: str, batching: Batching, on_plan: OnPlan | None,
                on_window: OnWindow | None) -> WindowResult:
    if len(names) != 1:
        raise WindowRefused("--window needs exactly one DATASET: the one 'lakepub plan --format json' listed it under")
    name = names[0]
    _retired(ctx, name, named=True)
    plan = plan_dataset(ctx, name, batching)
    if on_plan:
        on_plan(plan)
    if plan.blocked:
        raise WindowRefused(f"cannot reconcile {name}: {plan.blocked}; nothing was written")
    found = next((w for w in plan.windows if w.id == window), None)
    if found is None:
        raise WindowRefused(f"window {window} is not in the plan of {name} (batching {batching.label()}): its "
                            "partitions changed, or the plan used other --batch-days/--batch-partitions; run "
                            "'lakepub plan' again with the same batch options")
    if not found.pending:
        return WindowResult(name, window, [], 0, 0, 0, 0.0)
    result = compute_window(ctx, name, found.pending, found.id, into=plan.rebuild)
    if on_window:
        on_window(result)
    return result


def _retired(ctx: Context, name: str, *, named: bool) -> bool:
    """A retired derived dataset (``lakepub retire``) is skipped, like ``run`` skips a retired base
    dataset; naming it is refused (exit 3) with what to do (``lakepub restore``)."""
    from lakepub.lifecycle.retirement import check_not_retired, retirement_of

    table = ctx.table(name)
    if table is None or retirement_of(table) is None:
        return False
    if named:
        check_not_retired(table, name, "reconciling it")
    return True
