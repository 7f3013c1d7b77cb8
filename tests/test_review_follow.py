"""Adversarial review of ``run --follow`` (issue 16) against dataset retirement."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakepub.errors import ConfigError
from lakepub.generate import generate_stream
from lakepub.lifecycle.hard_delete import hard_delete
from lakepub.publish.follow import StopFlag, follow
from lakepub.workspace import Workspace

DATASET = "orders_daily"


def _one_cycle(ws: Workspace):
    stop = StopFlag()
    return follow(ws, DATASET, interval=0, stop=stop, on_cycle=lambda _result: stop.set())


@pytest.mark.parametrize("started", ["before the retirement", "after the retirement"])
def test_a_follower_never_recreates_a_dataset_the_janitor_hard_deleted(ws_path: Path, started: str):
    """A follower holds the definitions it was started with. Once the janitor hard-deleted the
    retired dataset (its tables dropped, its YAML deleted so that "no later run recreates them"),
    the follower's next cycle must neither create the tables again and republish the landing
    folder (exit 0 with a dataset the operator deleted) nor crash with a traceback: it stops,
    naming the definition that is gone (exit 2, as a restarted follower would)."""
    landing = ws_path / "landing" / "orders"
    landing.rmdir()
    generate_stream(landing, events=300, partitions=2, days=20, seed=5)
    ws = Workspace.open(ws_path)
    assert _one_cycle(ws).events == 300
    ws.retire(DATASET, grace="1s")
    if started == "after the retirement":
        ws = Workspace.open(ws_path)
    assert _one_cycle(ws).events == 0  # retired: skipped
    report = hard_delete(Workspace.open(ws_path), now=time.time() + 3600)
    assert DATASET in report.datasets
    definition = ws_path / "catalog" / "datasets" / f"{DATASET}.yaml"
    assert not definition.exists()
    with pytest.raises(ConfigError, match=str(definition)):
        _one_cycle(ws)  # the same process, still following
    assert not ws.catalog.table_exists((ws.config.namespace, DATASET)), "the follower recreated the dataset"


def test_run_follow_exits_2_once_its_retired_dataset_is_hard_deleted(ws_path: Path):
    landing = ws_path / "landing" / "orders"
    landing.rmdir()
    generate_stream(landing, events=200, partitions=2, days=20, seed=6)
    ws = Workspace.open(ws_path)
    ws.run(DATASET)
    ws.retire(DATASET, grace="1s")
    proc = subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "run", DATASET, "--follow",
                             "--interval", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("following")
        time.sleep(1.5)  # at least one skipped cycle
        assert proc.poll() is None
        hard_delete(Workspace.open(ws_path), now=time.time() + 3600)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out + err
    assert f"{DATASET}.yaml" in err and "Traceback" not in err
    assert not Workspace.open(ws_path).catalog.table_exists(("lakepub", DATASET))


def test_a_long_lived_workspace_does_not_publish_into_a_hard_deleted_dataset(ws_path: Path):
    from conftest import SEED_EVENTS

    ws = Workspace.open(ws_path)
    ws.publish(DATASET, SEED_EVENTS[:1], start={}, end={"p0": 1})
    ws.retire(DATASET, grace="1s")
    ws = Workspace.open(ws_path)  # opened while retired
    hard_delete(Workspace.open(ws_path), now=time.time() + 3600)
    with pytest.raises(ConfigError, match=f"{DATASET}.yaml"):
        ws.publish(DATASET, SEED_EVENTS[:1], start={}, end={"p0": 1})
    assert not ws.catalog.table_exists((ws.config.namespace, DATASET))


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_run_follow_on_a_retired_dataset_says_it_is_skipped(ws_path: Path, fmt: str):
    import json
    import signal

    ws = Workspace.open(ws_path)
    (ws_path / "landing" / "orders").rmdir()
    generate_stream(ws_path / "landing" / "orders", events=50, partitions=1, days=5, seed=7)
    ws.run(DATASET)
    ws.retire(DATASET, grace="7d")
    proc = subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "run", DATASET, "--follow",
                             "--interval", "1s", "--format", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(3.5)  # three cycles or so
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    if fmt == "json":
        cycles = [json.loads(line) for line in out.splitlines() if '"skipped"' in line and "stopped" not in line]
        assert len(cycles) == 1 and "retired" in cycles[0]["skipped"], out
    else:
        assert out.count("skipped:") == 1 and "is retired since" in out, out
