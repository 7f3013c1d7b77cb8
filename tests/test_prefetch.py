"""`lakepub run` starts reading the landing source on a thread before it imports the publisher
(``LandingSource.prefetch``): only a cache, so a right guess is used, and a wrong guess, a file
changed since or a failing guess changes nothing that is published."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from lakepub.config import open_config
from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.landing import LandingSource
from lakepub.quick.catalog import committed_guess
from lakepub.workspace import Workspace


def _published(root) -> dict:
    return {r["day"]: (r["cents"], r["orders"]) for r in
            Workspace.open(root).query("SELECT * FROM orders_daily").to_pylist()}


def _reads(monkeypatch) -> list[str]:
    """The names of the threads that parsed a segment."""
    seen: list[str] = []
    real = LandingSource._read

    def spy(self, segment, size, **kw):
        seen.append(threading.current_thread().name)
        return real(self, segment, size, **kw)

    monkeypatch.setattr(LandingSource, "_read", spy)
    return seen


def _prefetched_run(root, guess, **run) -> tuple[Workspace, object]:
    config = open_config(root)
    spec = config.dataset("orders_daily")
    source = LandingSource(config.landing_dir(spec.source), spec.contract).prefetch(guess)
    ws = Workspace(config, prefetched=source)
    return ws, ws.run("orders_daily", **run)


def test_cli_run_reads_the_first_segment_on_the_prefetch_thread_at_the_guessed_position(ws, cli, monkeypatch,
                                                                                         tmp_path):
    landing = ws.config.landing_dir("orders")
    stream = tmp_path / "stream"
    generate_stream(stream, events=4000, partitions=2, days=40, seed=3, segment_size=500)
    later = sorted(stream.glob("p*/0000[34].jsonl"))  # p0: 480 records, p1: 500 + 20
    for seg in sorted(stream.glob("p*/*.jsonl")):
        if seg not in later:
            (landing / seg.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(seg, landing / seg.parent.name / seg.name)
    seen = _reads(monkeypatch)
    assert committed_guess(ws.config, "orders_daily", "orders") == {}  # no table yet
    out = cli("run", "orders_daily", "--max-batch", "700", "--format", "json")
    assert out.code == 0, out.err
    assert out.json()["events"] == 3000
    # Each segment parsed once: by the prefetch (all of them fit the budget, from position {}),
    # unless the read-ahead reached one the thread had not started (it then reads it itself).
    assert len(seen) == 6 and "lakepub-prefetch" in seen
    # More events land; the next run's guess (the SQLite catalog row read with sqlite3) is the
    # committed position: the prefetch parses the segments holding it, not 00000.
    for seg in later:
        shutil.copy(seg, landing / seg.parent.name / seg.name)
    assert committed_guess(ws.config, "orders_daily", "orders") == {"p0": 1500, "p1": 1500}
    seen.clear()
    out = cli("run", "orders_daily", "--max-batch", "700", "--format", "json")
    assert out.code == 0, out.err
    assert out.json()["start"] == {"p0": 1500, "p1": 1500} and out.json()["events"] == 1000
    assert len(seen) == 3 and "lakepub-prefetch" in seen  # p0/00003, p1/00003, p1/00004 only
    assert _published(ws.config.root) == oracle_summary(read_stream(stream))


def test_a_wrong_or_failing_guess_publishes_the_same(ws_path, ws, monkeypatch, tmp_path):
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    stream = tmp_path / "stream"
    generate_stream(stream, events=2600, partitions=1, days=30, seed=5, segment_size=400)
    segments = sorted(stream.glob("p0/*.jsonl"))  # 6 x 400 + 200
    for seg in segments[:5]:
        shutil.copy(seg, p0 / seg.name)
    seen = _reads(monkeypatch)
    _, run = _prefetched_run(ws_path, lambda: {"p0": 1200}, max_batch=300)  # parses 00003 and 00004
    assert run.events == 2000 and run.start == {}
    assert 1 <= seen.count("lakepub-prefetch") <= 2 and len(seen) == 5  # 00000-00002 by the read-ahead
    assert _published(ws_path) == oracle_summary(read_stream(p0.parent))

    for seg in segments[5:]:
        shutil.copy(seg, p0 / seg.name)

    def fails() -> dict:
        raise RuntimeError("no guess")

    _, run = _prefetched_run(ws_path, fails, max_batch=300)
    assert run.events == 600 and run.start == {"p0": 2000}
    seen.clear()
    source = LandingSource(p0.parent, ws.config.dataset("orders_daily").contract).prefetch(lambda: {}, budget=1)
    source._wait_prefetch(planned=True)
    assert [key[0].name for key in source._parsed] == ["00000.jsonl"]  # one segment, however small the budget
    source.drop_prefetched(lambda seg: False)
    assert source._parsed == {} and seen.count("lakepub-prefetch") <= 1
    assert _published(ws_path) == oracle_summary(read_stream(stream))


def test_a_segment_grown_after_the_prefetch_parsed_it_is_read_again(ws_path, ws):
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    seg = p0 / "00000.jsonl"

    def line(order: str, cents: int) -> str:
        return json.dumps({"order_id": order, "version": 1, "day": "2025-10-01", "cents": cents, "deleted": False}) + "\n"

    seg.write_text(line("A", 100))
    config = open_config(ws_path)
    spec = config.dataset("orders_daily")
    source = LandingSource(config.landing_dir(spec.source), spec.contract).prefetch(lambda: {})
    source._wait_prefetch(planned=True)
    assert [f.result()[1].num_rows for f in source._parsed.values()] == [1]  # parsed: one record
    with seg.open("a") as fh:
        fh.write(line("B", 250))
    run = Workspace(config, prefetched=source).run("orders_daily")
    assert run.events == 2
    assert {d.isoformat(): v for d, v in _published(ws_path).items()} == {"2025-10-01": (350, 2)}
    assert source._parsed == {}  # nothing kept for the rest of the run


@pytest.mark.parametrize("off", ["0", "OFF", " False "])
def test_lakepub_prefetch_0_turns_it_off(ws, cli, monkeypatch, off):
    generate_stream(ws.config.landing_dir("orders"), events=1200, partitions=2, days=20, seed=2, segment_size=300)
    seen = _reads(monkeypatch)
    monkeypatch.setenv("LAKEPUB_PREFETCH", off)
    out = cli("run", "orders_daily", "--max-batch", "500", "--format", "json")
    assert out.code == 0 and out.json()["events"] == 1200
    assert seen and "lakepub-prefetch" not in seen  # every segment by the read-ahead


def test_an_unknown_position_parses_nothing_ahead(ws_path, ws, monkeypatch):
    generate_stream(ws.config.landing_dir("orders"), events=900, partitions=1, days=20, seed=4, segment_size=300)
    seen = _reads(monkeypatch)
    _, run = _prefetched_run(ws_path, lambda: None, max_batch=400)  # e.g. a catalog other than SQLite
    assert run.events == 900 and seen and "lakepub-prefetch" not in seen
