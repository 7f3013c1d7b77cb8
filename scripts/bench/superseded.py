"""Superseded table folders: what the janitor's sweep costs, next to a plain walk-and-delete.

A local workspace gets ``--publishes`` publishes of ``orders_daily``, then ``--folders`` leftover
``orders_daily__rebuild_<hex>/`` folders of ``--files`` files each (what swapped-away rebuilds
leave) and as many look-alike folders that must be kept. Timed, in one run:

* ``sweep (dry run)`` and ``sweep (delete)``: ``lakepub.maintenance.superseded.sweep`` inside a
  ``run_janitor(..., JanitorOptions(older_than_s=0))`` (catalog listing twice, one folder
  listing, the recursive listing of each matching folder, the deletions);
* ``janitor total``: that whole run (the tables' expiry and orphan scans included);
* ``baseline``: the same number of files planted again and removed with ``os.walk`` + ``os.remove``.

    python scripts/bench/superseded.py [--quick] [--folders 20] [--files 30] [--publishes 10] [--json PATH]

``--quick`` (CI): 5 folders of 10 files after 3 publishes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import common as c

sys.path.insert(0, str(c.REPO / "tests"))  # test_janitor's publish helper


def plant(namespace: Path, folders: int, files: int, prefix: str) -> None:
    for n in range(folders):
        data = namespace / f"{prefix}{n:012x}" / "data"
        data.mkdir(parents=True)
        for k in range(files):
            (data / f"{k}.parquet").write_bytes(b"x" * 1000)
    os.sync()


def main() -> None:
    p = c.parser(__doc__.split("\n")[0])
    p.add_argument("--folders", type=int, help="leftover rebuild folders (default 20; --quick 5)")
    p.add_argument("--files", type=int, help="files per folder (default 30; --quick 10)")
    p.add_argument("--publishes", type=int, help="publishes before (default 10; --quick 3)")
    args = p.parse_args()
    args.folders = args.folders or (5 if args.quick else 20)
    args.files = args.files or (10 if args.quick else 30)
    args.publishes = args.publishes or (3 if args.quick else 10)
    r = c.Report("superseded", "the janitor's sweep of superseded table folders vs os.walk + os.remove", args.quick,
                 params={"folders": args.folders, "files_per_folder": args.files, "publishes": args.publishes})

    with c.scratch(args, "superseded") as tmp:
        figures = measure(args, Path(tmp) / "ws")
    r.section(f"{args.folders} leftover rebuild folders of {args.files} files, {args.folders} look-alikes kept")
    r.figure("sweep_dry_run_ms", figures["sweep_dry_run_ms"], "sweep (dry run)", "ms",
             f"of a {figures['janitor_total_dry_run_ms']:.0f} ms janitor run; {figures['folders_dry_run']} folders")
    r.figure("janitor_total_dry_run_ms", figures["janitor_total_dry_run_ms"], "janitor total (dry run)", "ms")
    r.figure("sweep_delete_ms", figures["sweep_delete_ms"], "sweep (delete)", "ms",
             f"{figures['files_deleted']} files deleted in {figures['folders_delete']} folders")
    r.figure("janitor_total_delete_ms", figures["janitor_total_delete_ms"], "janitor total (delete)", "ms")
    r.figure("baseline_walk_remove_ms", figures["baseline_walk_remove_ms"], "baseline: os.walk + os.remove", "ms")
    r.ratio("sweep_over_baseline", figures["sweep_delete_ms"], max(figures["baseline_walk_remove_ms"], 1e-3),
            "sweep (delete) / baseline")
    for key in ("folders", "files_per_folder", "folders_dry_run", "folders_delete", "files_deleted"):
        r.figures[key] = figures[key]
    r.emit(args)


def measure(args, root: Path) -> dict[str, float | int]:
    from lakepub.init import init_workspace
    from lakepub.maintenance import JanitorOptions, run_janitor
    from lakepub.maintenance import janitor as janitor_module
    from lakepub.workspace import Workspace
    from test_janitor import DATASET, publish

    init_workspace(root)
    ws = Workspace.open(root)
    for i in range(args.publishes):
        publish(ws, i)
    namespace = Path(ws.catalog.load_table((ws.config.namespace, DATASET)).location().removeprefix("file://")).parent
    plant(namespace, args.folders, args.files, f"{DATASET}__rebuild_")
    plant(namespace, args.folders, args.files, f"{DATASET}_lookalike_")  # never matched: kept

    spent: list[float] = []
    sweep = janitor_module.sweep

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return sweep(*a, **k)
        finally:
            spent.append(time.perf_counter() - t0)

    janitor_module.sweep = timed
    figures: dict[str, float | int] = {"folders": args.folders, "files_per_folder": args.files}
    for label, dry in (("dry_run", True), ("delete", False)):
        t0 = time.perf_counter()
        report = run_janitor(Workspace.open(root), options=JanitorOptions(older_than_s=0, dry_run=dry))
        figures[f"janitor_total_{label}_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        figures[f"sweep_{label}_ms"] = round(spent[-1] * 1000, 1)
        figures[f"folders_{label}"] = len(report.superseded)
    figures["files_deleted"] = sum(f.files_removed for f in report.superseded)
    assert figures["files_deleted"] == args.folders * args.files
    assert all((namespace / f"{DATASET}_lookalike_{n:012x}").exists() for n in range(args.folders))

    plant(namespace, args.folders, args.files, "baseline_")
    t0 = time.perf_counter()
    for n in range(args.folders):
        for folder, _dirs, names in os.walk(namespace / f"baseline_{n:012x}"):
            for name in names:
                os.remove(os.path.join(folder, name))
    figures["baseline_walk_remove_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    janitor_module.sweep = sweep
    return figures


if __name__ == "__main__":
    main()
