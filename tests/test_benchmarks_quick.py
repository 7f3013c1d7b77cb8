"""Every benchmark of scripts/bench runs in its --quick mode: it completes and prints its figures.

Not a timing test: figures are not compared with anything, only required to be there. The S3 part
of the janitor benchmark and the object_store benchmark start their own moto server on a loopback
port. A second test keeps this list, run_all.py's and the scripts that build a report in step, so a
new benchmark cannot break silently because nothing runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"
BENCHMARKS = ["throughput", "wide", "history", "overhead", "reads", "janitor", "memory", "startup",
              "derive", "lifecycle", "evolution", "merge_on_read", "mor_fold", "mor_scan_cost", "object_store", "superseded",
              "logs", "dual_write"]
NOT_RUN = {"compare_runs": "needs a second checkout (--before DIR)",
           "merge_on_read_wide": "a part of merge_on_read.py (its --wide mode), not a script of its own"}


def test_every_report_building_benchmark_is_run_here_and_by_run_all():
    builds_report = sorted(path.stem for path in BENCH.glob("*.py")
                           if path.stem not in NOT_RUN and "c.Report(" in path.read_text())
    assert sorted(BENCHMARKS) == builds_report
    sys.path.insert(0, str(BENCH))
    try:
        import run_all
    finally:
        sys.path.remove(str(BENCH))
    assert sorted(run_all.BENCHMARKS + run_all.FEATURE_BENCHMARKS) == sorted(BENCHMARKS)


def test_every_benchmark_runs_in_quick_mode(tmp_path):
    cache = tmp_path / "streams"
    timings = {}
    for name in BENCHMARKS:
        report_path = tmp_path / f"{name}.json"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(BENCH / f"{name}.py"), "--quick", "--json", str(report_path), "--cache", str(cache)],
            capture_output=True, text=True, timeout=180,
        )
        timings[name] = round(time.perf_counter() - t0, 1)
        assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        out = proc.stdout
        assert f"== {name} (quick)" in out, out
        assert "machine: " in out and " cores (" in out and "duckdb " in out and "pyiceberg " in out, out

        report = json.loads(report_path.read_text())
        assert report["benchmark"] == name and report["mode"] == "quick"
        numbers = {k: v for k, v in report["figures"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert numbers, f"{name}: no figures in its JSON report"
        figure_lines = [line for line in out.splitlines() if line.startswith("  ")]
        assert len(figure_lines) >= len(numbers) // 2, f"{name}: figures missing from the printed report:\n{out}"
        for target in report["targets"]:
            assert target["value"] is not None, f"{name}: target {target['name']} has no measured value"
            assert target["name"] in out, f"{name}: target {target['name']} not printed"
    print("quick benchmark seconds:", timings)
