"""Superseded table folders: what the janitor's sweep costs, next to a plain walk-and-delete.

A local workspace gets ``--publishes`` publishes of ``orders_daily``, then ``--folders`` leftover
``orders_daily__rebuild_<hex>/`` folders of ``--files`` files each (what swapped-away rebuilds
leave) and as many look-alike folders that must be kept. Timed, in one run:

* ``sweep (dry run)`` and ``sweep (delete)``: ``lakepub.maintenance.superseded.sweep`` inside a
  ``run_janitor(..., JanitorOptions(older_than_s=0))`` (catalog listing twice, one folder
  listing, the recursive listing of each matching folder, the deletions);
* ``janitor total``: that whole run (the tables' expiry and orphan scans included);
* ``baseline``: the same number of files planted again and removed with ``os.walk`` + ``os.remove``.

    python scripts/bench/superseded.py [--folders 20] [--files 30] [--publishes 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))


def plant(namespace: Path, folders: int, files: int, prefix: str) -> None:
    for n in range(folders):
        data = namespace / f"{prefix}{n:012x}" / "data"
        data.mkdir(parents=True)
        for k in range(files):
            (data / f"{k}.parquet").write_bytes(b"x" * 1000)
    os.sync()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--folders", type=int, default=20)
    p.add_argument("--files", type=int, default=30)
    p.add_argument("--publishes", type=int, default=10)
    p.add_argument("--json", help="write the figures as JSON to this path (-: stdout)")
    args = p.parse_args()

    from lakepub.init import init_workspace
    from lakepub.maintenance import JanitorOptions, run_janitor
    from lakepub.maintenance import janitor as janitor_module
    from lakepub.workspace import Workspace
    from test_janitor import DATASET, publish

    root = Path(tempfile.mkdtemp(prefix="lakepub-sweep-")) / "ws"
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
    baseline = max(float(figures["baseline_walk_remove_ms"]), 1e-3)
    figures["sweep_over_baseline"] = round(float(figures["sweep_delete_ms"]) / baseline, 2)
    shutil.rmtree(root.parent, ignore_errors=True)

    text = "\n".join(f"{k}: {v}" for k, v in figures.items())
    if args.json == "-":
        print(json.dumps(figures))
        print(text, file=sys.stderr)
    else:
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
