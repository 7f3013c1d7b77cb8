"""``lakepub run --follow`` (publish/follow.py): one process publishing the landing folder as it
grows, stopped by SIGTERM between batches with exit 0 and nothing half-published.

The oracle: after the stop, the published table equals the projection of exactly the landing
records up to the committed position of each partition (``generate.oracle_summary``), and
``verify --deep`` recomputes it from the ledger."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

import pytest

from conftest import summary_rows
from lakepub.generate import generate_stream, oracle_summary, partition_dirs
from lakepub.workspace import Workspace

DATASET = "orders_daily"


def _landing(ws_path: Path) -> Path:
    folder = ws_path / "landing" / "orders"
    if folder.exists():
        folder.rmdir()
    return folder


def _complete(part: Path):
    """The records of a partition folder: newline-terminated lines (a line being written does not count)."""
    for segment in sorted(part.glob("*.jsonl")):
        for line in segment.read_text().splitlines(keepends=True):
            if line.endswith("\n") and line.strip():
                yield json.loads(line)


def _oracle_at(landing: Path, position: dict[str, int]) -> list[tuple]:
    events = [e for part in partition_dirs(landing) for e in islice(_complete(part), position.get(part.name, 0))]
    return [(d.isoformat(), cents, orders) for d, (cents, orders) in sorted(oracle_summary(events).items())]


def _records(landing: Path) -> dict[str, int]:
    return {part.name: sum(1 for _ in _complete(part)) for part in partition_dirs(landing)}


def _position(ws_path: Path) -> dict[str, int]:
    return Workspace.open(ws_path).committed_positions(DATASET).get("orders", {})


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _start(ws_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "run", DATASET, "--follow",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_follow_publishes_as_landing_grows_and_stops_on_sigterm(ws_path):
    landing = _landing(ws_path)
    generate_stream(landing, events=1500, partitions=2, days=60, seed=3)
    proc = _start(ws_path, "--interval", "1s", "--max-batch", "500")
    try:
        _wait(lambda: _position(ws_path) == _records(landing))
        # more records land (a new segment per partition, a producer's last line still unterminated)
        extra = ws_path.parent / "extra"
        generate_stream(extra, events=700, partitions=2, days=60, seed=4)
        for part in partition_dirs(extra):
            lines = "".join(p.read_text() for p in sorted(part.glob("*.jsonl"))).replace('"order_id": "o', '"order_id": "x')
            (landing / part.name / "99999.jsonl").write_text(lines + '{"order_id": "x-partial", "ver')
        _wait(lambda: _position(ws_path) == _records(landing))
        assert proc.poll() is None  # still following
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert "stopped by SIGTERM" in out and "Traceback" not in err
    position = _position(ws_path)
    assert position == _records(landing) and sum(position.values()) == 2200
    ws = Workspace.open(ws_path)
    assert summary_rows(ws) == _oracle_at(landing, position)
    assert ws.verify(DATASET, deep=True).ok


def test_sigterm_during_a_run_stops_between_batches(ws_path):
    """SIGTERM while batches are publishing: the batch under way commits, no further one starts."""
    landing = _landing(ws_path)
    generate_stream(landing, events=6000, partitions=2, days=60, seed=8)
    proc = _start(ws_path, "--interval", "1s", "--max-batch", "200", "--format", "json")
    try:
        _wait(lambda: sum(_position(ws_path).values()) >= 400)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    stopped = json.loads(out.strip().splitlines()[-1])["stopped"]
    assert stopped["stopped_by"] == "SIGTERM"
    position = _position(ws_path)
    assert 400 <= sum(position.values()) < 6000  # stopped early, at a batch boundary
    assert stopped["end"] == position and stopped["events"] == sum(position.values())
    ws = Workspace.open(ws_path)
    assert summary_rows(ws) == _oracle_at(landing, position)
    assert ws.verify(DATASET, deep=True).ok
    # the next run starts exactly after it
    rest = ws.run(DATASET)
    assert rest.start == position and sum(rest.end.values()) == 6000
    assert summary_rows(ws) == _oracle_at(landing, rest.end)


@pytest.mark.parametrize("interval", ["0s", "soon"])
def test_follow_refuses_a_bad_interval(cli, interval):
    result = cli("run", DATASET, "--follow", "--interval", interval)
    assert result.code == 2 and "--interval" in result.err and len(result.err.strip().splitlines()) == 1


def test_interval_without_follow_is_refused(cli):
    result = cli("run", DATASET, "--interval", "5s")
    assert result.code == 2 and "--follow" in result.err and len(result.err.strip().splitlines()) == 1
