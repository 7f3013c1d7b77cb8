"""Review of the landing prefetch (``LandingSource.prefetch``, issue 10): the cached parse is
only used for the bytes a read would return now; errors in a prefetched segment still exit 2
naming file, line and field; the thread never outlives a failed run."""

from __future__ import annotations

import json
import os
import threading

import numpy as np

from lakepub.config import open_config
from lakepub.landing import LandingSource
from lakepub.publish.versioning import _match
from lakepub.workspace import Workspace


def _line(order: str, cents: int, version: int = 1) -> str:
    return json.dumps({"order_id": order, "version": version, "day": "2025-10-01", "cents": cents,
                       "deleted": False}) + "\n"


def _published(root) -> dict:
    return {str(r["day"]): (r["cents"], r["orders"]) for r in
            Workspace.open(root).query("SELECT * FROM orders_daily").to_pylist()}


def _prefetched(ws_path, first: str, rows: int):
    """A landing segment ``p0/00000.jsonl`` holding ``first``, parsed by a finished prefetch of
    ``rows`` rows: (its config, the source, the segment)."""
    config = open_config(ws_path)
    p0 = config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    seg = p0 / "00000.jsonl"
    seg.write_text(first)
    spec = config.dataset("orders_daily")
    source = LandingSource(config.landing_dir(spec.source), spec.contract).prefetch(lambda: {})
    source._wait_prefetch(planned=True)
    assert [f.result()[1].num_rows for f in source._parsed.values()] == [rows]
    return config, source, seg


def test_a_segment_rewritten_in_place_with_the_same_size_and_mtime_is_read_again(ws_path, ws):
    """A producer (or ``cp -p``/``rsync -t --inplace``) rewrites a segment after the prefetch parsed
    it: same size, modification time restored. The run must publish what the file holds now."""
    config, source, seg = _prefetched(ws_path, _line("A", 100) + _line("B", 200), 2)
    st = seg.stat()
    seg.write_text(_line("A", 900) + _line("B", 200))  # same length
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (seg.stat().st_size, seg.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    run = Workspace(config, prefetched=source).run("orders_daily")
    assert run.events == 2
    assert _published(ws_path) == {"2025-10-01": (1100, 2)}


def test_a_segment_replaced_by_rename_with_the_same_size_and_mtime_is_read_again(ws_path, ws):
    """The producer's usual atomic replace (write a temp file, rename over the segment), the new
    file carrying the old one's modification time."""
    config, source, seg = _prefetched(ws_path, _line("A", 100), 1)
    p0 = seg.parent
    st = seg.stat()
    tmp = p0 / ".00000.tmp"
    tmp.write_text(_line("A", 700))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, seg)
    run = Workspace(config, prefetched=source).run("orders_daily")
    assert run.events == 1
    assert _published(ws_path) == {"2025-10-01": (700, 1)}


def test_an_invalid_prefetched_segment_exits_2_naming_file_line_and_field(ws, cli):
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    (p0 / "00000.jsonl").write_text(_line("A", 100) + _line("B", 5).replace('"cents": 5', '"cents": "x"'))
    (p0 / "00001.jsonl").write_text(_line("C", 100))
    before = {t.ident for t in threading.enumerate()}
    out = cli("run", "orders_daily")
    assert out.code == 2, (out.out, out.err)
    assert "00000.jsonl" in out.err and "00000.jsonl:2:" in out.err and "cents" in out.err, out.err
    assert "Traceback" not in out.err
    for t in threading.enumerate():  # the prefetch thread ends with the run
        if t.ident not in before and t.name == "lakepub-prefetch":
            t.join(timeout=30)
            assert not t.is_alive()


def test_a_failing_first_batch_leaves_no_parse_running(ws, cli, monkeypatch):
    """An error before the first batch is read: exit non-zero, and the thread ends (no hang at exit)."""
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    for i in range(6):
        (p0 / f"{i:05d}.jsonl").write_text("".join(_line(f"o{i}-{k}", k) for k in range(2000)))
    parsed: list[str] = []
    real = LandingSource._read

    def spy(self, segment, size, **kw):
        parsed.append(segment.name)
        return real(self, segment, size, **kw)

    monkeypatch.setattr(LandingSource, "_read", spy)

    def boom(self, *a, **k):
        raise RuntimeError("catalog down")

    monkeypatch.setattr(Workspace, "committed_positions", boom)
    before = {t.ident for t in threading.enumerate()}
    out = cli("run", "orders_daily")
    assert out.code != 0 and "catalog down" in out.err, (out.code, out.err)
    for t in threading.enumerate():
        if t.ident not in before and t.name == "lakepub-prefetch":
            t.join(timeout=30)
            assert not t.is_alive()


def test_version_match_edges_equal_intersect1d():
    def reference(ag, av, bg, bv):
        ranks = np.unique(np.concatenate([av, bv]), return_inverse=True)[1].astype(np.int64).reshape(-1)
        a_key, b_key = (ag << 32) | ranks[:len(av)], (bg << 32) | ranks[len(av):]
        return np.intersect1d(a_key, b_key, return_indices=True)[1:]

    e = np.zeros(0, dtype=np.int64)
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    cases = [
        (e, e, e, e),
        (np.array([0]), np.array([1]), e, e),
        (e, e, np.array([0]), np.array([1])),
        (np.array([0, 0, 1]), np.array([lo, hi, 0]), np.array([0, 1, 0, 0]), np.array([hi, 0, lo, hi])),
        (np.array([0, 1]), np.array([(1 << 32) - 1, 0]), np.array([0, 0, 1]), np.array([(1 << 32) - 1] * 2 + [0])),
        (np.array([0, 0]), np.array([0, 1 << 32]), np.array([0, 0]), np.array([1 << 32, 0])),
        (np.array([3, 1, 2]), np.array([5, 5, 5]), np.array([2, 2, 1, 3, 3, 9]), np.array([5, 5, 5, 5, 4, 5])),
    ]
    rng = np.random.default_rng(11)
    for _ in range(2000):
        pairs = sorted({(int(g), int(v)) for g, v in zip(rng.integers(0, 6, 12), rng.choice([lo, -1, 0, 1, 2, (1 << 32) - 1, 1 << 32, hi], 12))})
        if rng.integers(2):
            pairs = [pairs[i] for i in rng.permutation(len(pairs))]
        n = int(rng.integers(0, 20))
        cases.append((np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64),
                      rng.integers(0, 6, n).astype(np.int64), rng.choice([lo, -1, 0, 1, 2, (1 << 32) - 1, 1 << 32, hi], n).astype(np.int64)))
    for k, (ag, av, bg, bv) in enumerate(cases):
        ag, av, bg, bv = (np.asarray(x, dtype=np.int64) for x in (ag, av, bg, bv))
        got, want = _match(ag, av, bg, bv), reference(ag, av, bg, bv)
        assert all(np.array_equal(x, y) for x, y in zip(got, want)), k
        assert all(x.dtype.kind == "i" for x in got)


def test_a_partial_last_line_is_not_published_until_complete_with_small_batches(ws, cli):
    """The newest segment's unterminated last line (a producer still writing it) is neither
    prefetched nor published; once complete the next run publishes it, batches smaller than a
    segment included."""
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    (p0 / "00000.jsonl").write_text("".join(_line(f"a{k}", 10) for k in range(7)))
    last = p0 / "00001.jsonl"
    partial = _line("z", 1000)
    last.write_text("".join(_line(f"b{k}", 20) for k in range(5)) + partial[:25])
    out = cli("run", "orders_daily", "--max-batch", "3", "--format", "json")
    assert out.code == 0, out.err
    assert out.json()["events"] == 12
    assert _published(ws.config.root) == {"2025-10-01": (170, 12)}
    with last.open("a") as fh:
        fh.write(partial[25:])
    out = cli("run", "orders_daily", "--max-batch", "2", "--format", "json")
    assert out.code == 0, out.err
    assert out.json()["events"] == 1 and out.json()["start"] == {"p0": 12}
    assert _published(ws.config.root) == {"2025-10-01": (1170, 13)}
