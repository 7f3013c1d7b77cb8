"""Regenerate ``tests/fixtures/workspace_v0.tar.gz``: a workspace written by release 013cd58.

The fixture guards the promise that a workspace created by that release keeps working with
later code (``tests/test_old_workspace.py``). It must therefore be written by the *released*
code, not by the code of the branch that commits it. Run it from a checkout of 013cd58::

    git worktree add --detach /tmp/lakepub-013cd58 013cd58
    cd /tmp/lakepub-013cd58
    PYTHONPATH=$PWD /path/to/.venv/bin/python /path/to/this/checkout/scripts/make_old_workspace_fixture.py \\
        --out /path/to/this/checkout/tests/fixtures

(the script refuses to run when the imported ``lakepub`` is not that release's: it checks that
``lakepub.keys.ORDER_KEYS_VERSION`` is ``splitmix64x2-v1`` and that ``lakepub.store.layout`` has
no ``HISTORY_ARROW`` (the ledger's ``history`` column), both changed right after 013cd58; pass ``--any-version`` to skip the check).

What it builds, through the CLI (``python -m lakepub.cli``), in :data:`FIXTURE_ROOT`:

1. ``lakepub init``; a deterministic stream (``generate_stream``: 3,000 events, 2 partitions,
   30 days, segments of 250 lines: new orders, corrections, duplicates, late versions, deletes)
   is generated outside the workspace and its segments are copied into ``landing/orders/``
   a few at a time;
2. ``run --max-batch 400`` over the first 2 segments of each partition (several batches);
3. a refused publish (stale start, exit 3), so the audit table exists;
4. ``run --max-batch 500`` over 2 more segments each;
5. ``compact orders_daily`` (the ledger gets its floor and a compacted key-index run);
6. ``run --max-batch 300`` over 1 more segment each;
7. the last segment of each partition is copied into landing and left unprocessed.

Iceberg stores absolute ``file://`` paths (catalog row, metadata JSON, manifest lists and
manifests), so the workspace is written under a long, fixed path that the test replaces, byte
for byte, with a path of the same length (same-length replacement keeps Avro's length-prefixed
strings and SQLite's records valid). ``expected.json`` (beside the archive) holds that prefix,
the positions and rows published at fixture time, the publish log, and the oracle of the table
after all of landing is published (``oracle_summary(read_stream(landing))``).

Timestamps (snapshot times, uuids) differ between runs, so a regenerated archive differs in
bytes from the committed one; its logical content (positions, rows, oracle) does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The fixture's workspace folder when it was written. Long on purpose: the test relocates the
# workspace to a path of exactly this length under its tmp_path, which must not be longer.
_PAD = "0123456789" * 12
FIXTURE_PARENT = f"/tmp/lakepub-fixture-v0-{_PAD}"
FIXTURE_ROOT = f"{FIXTURE_PARENT}/ws"  # 147 characters
ARCHIVE = "workspace_v0.tar.gz"
EXPECTED = "expected.json"
DATASET = "orders_daily"
STREAM = dict(events=3_000, partitions=2, days=30, seed=11, segment_size=250)
# Segments of each partition copied into landing before each step (cumulative).
STEPS = [("run", 2, 400), ("stale", None, None), ("run", 4, 500), ("compact", None, None), ("run", 5, 300)]


def cli(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "lakepub.cli", "-w", FIXTURE_ROOT, *args],
                          capture_output=True, text=True, cwd=FIXTURE_PARENT, timeout=600)
    print(f"$ lakepub {' '.join(args)}  -> exit {proc.returncode}")
    for line in (proc.stdout + proc.stderr).strip().splitlines()[-4:]:
        print(f"    {line}")
    if proc.returncode not in ok:
        raise SystemExit(f"unexpected exit {proc.returncode}: {proc.stdout}\n{proc.stderr}")
    return proc


def check_release() -> None:
    import lakepub.keys
    import lakepub.store.layout as layout

    if lakepub.keys.ORDER_KEYS_VERSION != "splitmix64x2-v1" or hasattr(layout, "HISTORY_ARROW"):
        raise SystemExit(f"lakepub imported from {Path(lakepub.keys.__file__).parent} is not release 013cd58 "
                         "(see this script's docstring; --any-version skips this check)")


def copy_segments(stream: Path, landing: Path, upto: int) -> None:
    for part in sorted(p for p in stream.iterdir() if p.is_dir()):
        (landing / part.name).mkdir(parents=True, exist_ok=True)
        for seg in sorted(part.glob("*.jsonl"))[:upto]:
            if not (landing / part.name / seg.name).exists():
                shutil.copyfile(seg, landing / part.name / seg.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the archive and expected.json to")
    parser.add_argument("--any-version", action="store_true", help="do not check that lakepub is release 013cd58")
    args = parser.parse_args()
    if not args.any_version:
        check_release()
    from lakepub.generate import generate_stream, oracle_summary, read_stream

    if os.path.exists(FIXTURE_PARENT):
        shutil.rmtree(FIXTURE_PARENT)
    os.makedirs(FIXTURE_PARENT)
    root = Path(FIXTURE_ROOT)
    cli("init", FIXTURE_ROOT)
    landing = root / "landing" / "orders"
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "stream"
        stats = generate_stream(stream, **STREAM)
        n_segments = max(len(list(part.glob("*.jsonl"))) for part in stream.iterdir())
        assert n_segments > 5, "the stream is too short for the steps"
        for step, upto, max_batch in STEPS:
            if step == "run":
                copy_segments(stream, landing, upto)
                cli("run", DATASET, "--max-batch", str(max_batch))
            elif step == "compact":
                cli("compact", DATASET)
            else:  # a batch whose start is not the committed position: refused, recorded in the audit table
                batch = Path(tmp) / "stale.jsonl"
                with (landing / "p0" / "00000.jsonl").open() as fh:
                    batch.write_text("".join(next(fh) for _ in range(2)))
                cli("publish", DATASET, "--events", str(batch), "--start", '{"p0": 1}', "--end", '{"p0": 3}', ok=(3,))
        status = json.loads(cli("status", DATASET, "--format", "json").stdout)[0]
        log = json.loads(cli("log", DATASET, "--format", "json").stdout)
        rows = json.loads(cli("query", f"SELECT day::VARCHAR AS day, cents, orders FROM {DATASET} ORDER BY day",
                              "--format", "json").stdout)
        cli("verify", DATASET, "--deep")
        copy_segments(stream, landing, n_segments)  # the rest stays unprocessed
    oracle = oracle_summary(read_stream(landing))
    available = {}
    for part in sorted(p for p in landing.iterdir() if p.is_dir()):
        available[part.name] = sum(1 for seg in sorted(part.glob("*.jsonl")) for line in seg.open() if line.strip())
    import lakepub

    expected = {
        "created_by": "lakepub release 013cd58 (scripts/make_old_workspace_fixture.py)",
        "lakepub_version": getattr(lakepub, "__version__", None),
        "fixture_root": FIXTURE_ROOT,
        "dataset": DATASET,
        "stream": {**STREAM, "events_written": stats.events},
        "positions": status.get("positions"),
        "landing_available": available,
        "status": status,
        "rows": rows,
        "log": log,
        "oracle": [[d.isoformat(), c, o] for d, (c, o) in sorted(oracle.items())],
    }
    # Nothing of the workspace may depend on the generating machine beyond the fixture root.
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / EXPECTED).write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    with tarfile.open(args.out / ARCHIVE, "w:gz", compresslevel=9) as tar:
        tar.add(FIXTURE_ROOT, arcname="ws", filter=_normalise)
    print(f"wrote {args.out / ARCHIVE} ({(args.out / ARCHIVE).stat().st_size:,} bytes) and {args.out / EXPECTED}")


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


if __name__ == "__main__":
    main()
