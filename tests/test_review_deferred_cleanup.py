"""Review of ``store/commit.deferred_cleanup`` (issue 16): inside ``lakepub run`` a commit's
version hints and manifest clean-up finish in the background and the next commit waits for them
first. The clean-up after a confirmed swap must never fail a publish ("nothing here can fail the
commit"): a manifest list that cannot be read back to find the merged-away manifests (evicted
from memory and a request that failed) leaves at most an orphan for the janitor. Before the fix
that error failed the NEXT batch of the run before its commit (exit non-zero, the data fine)."""

from __future__ import annotations

import threading

from pyiceberg.table.snapshots import Snapshot

from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.workspace import Workspace


def _published(ws: Workspace) -> dict:
    fresh = Workspace.open(ws.config.root)
    return {r["day"]: (r["cents"], r["orders"]) for r in fresh.query("SELECT * FROM orders_daily").to_pylist()}


def test_a_failing_manifest_clean_up_fails_no_batch_of_a_run(ws: Workspace, monkeypatch):
    landing = ws.config.landing_dir("orders")
    generate_stream(landing, events=1200, partitions=1, days=30, seed=8, spread=True)
    real = Snapshot.manifests
    failed: list[str] = []

    def manifests(self, io):
        if threading.current_thread().name.startswith("lakepub-commit"):  # the clean-up after the swap
            failed.append(threading.current_thread().name)
            raise OSError("injected: the manifest list could not be read back (connection reset)")
        return real(self, io)

    monkeypatch.setattr(Snapshot, "manifests", manifests)
    result = ws.run("orders_daily", max_batch=300)
    assert failed and len(result.batches) == 4
    monkeypatch.undo()
    assert _published(ws) == oracle_summary(read_stream(landing))
