"""Benchmark: lakepub on object storage (moto S3 with injected latency) beside a local warehouse.

One moto server runs in its own process (``s3_latency_server.py``) adding ``--latency-ms`` to
every request (a stand-in for real S3's 20-50 ms first byte) and counting requests: in all, and
in sequence (the longest chain of requests each started after the previous one finished). The
same steps run against a local warehouse and an S3 one (SQLite catalog both), in the same run:

* history: ``--history`` version-1 orders over 3 years, published in batches of ``--build-batch``;
* warm publish: ``--batch`` events (history.py's mix: every batch rewrites ~37 month partitions)
  through one ``Workspace`` (one warm-up, then timed ``--repeat`` times, median);
* cold publish: a publish in a new process, timed after its imports (the cache under
  .lakepub/cache emptied, once; then warm, ``--repeat`` times, median); the whole process's wall
  time is reported beside it. "After its imports": from after ``import lakepub.workspace``,
  pyarrow, pyiceberg's SQL catalog and pyarrow FileIO (what any lakepub process imports before
  it publishes), so Python's start and those imports (~1-2 s) are outside the figure, and
  ``Workspace.open``, the catalog's opening, the modules a publish imports on first use and
  lakepub's background head start (``store/s3_warm.py``) inside it: issue 16's target is the
  publish work a new process adds, not the process. ``cold_publish_ab.py`` compares two
  checkouts on this figure, interleaved;
* run: a new ``lakepub run`` process over a ``--run-events`` landing stream (batches of 100k),
  ``--run-repeat`` times on fresh workspaces, local and S3 alternately (medians, and the median
  of the pairs' ratios: on a shared machine one run varies by 2x with the load).

The medians compare like with like: every 4th publish merges key-index runs (store/key_index.py:
an extra run written and uploaded, ~2-3x a plain publish's time on moto when a cascade merges
the larger runs), and with 5 publishes per figure at most 2 of them merge, so each median is a
publish that did not (the slowest of each set is reported beside it).

``--partition`` sets orders_daily's partition grain (``month``, the default, ``year`` or ``none``):
how many files each publish rewrites, i.e. what tiny partitions cost on S3; ``--grains year,none``
also measures the warm publish at those grains in the same run.

    python scripts/bench/object_store.py [--quick] [--latency-ms 30] [--history 1000000] [--partition year]
"""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

import common as c
from history import History, build

HERE = Path(__file__).resolve().parent
KEY, SECRET, REGION = "bench-key", "bench-secret", "us-east-1"


# A publish in a new process, timed from after the imports (what a new process adds over a warm
# one: opening the catalog, loading the tables, the index and the published rows), to stdout.
_COLD = """
import sys, time
from lakepub.workspace import Workspace
import pyarrow, pyiceberg.catalog.sql, pyiceberg.io.pyarrow  # imported by any lakepub process before it publishes
root, events, start, end = sys.argv[1:5]
t0, c0 = time.perf_counter(), time.process_time()
ws = Workspace.open(root)
ws.publish("orders_daily", events, start={"p0": int(start)}, end={"p0": int(end)})
print(time.perf_counter() - t0, time.process_time() - c0)
"""


class Server:
    """The latency server process: its endpoint, counters and a bucket."""

    def __init__(self, latency_ms: float):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "s3_latency_server.py"), "--latency-ms",
                                      str(latency_ms)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("READY "):
            raise SystemExit(f"latency server failed to start: {line!r}")
        self.url = line.split(" ", 1)[1]
        self.bucket = "lakepub-bench"
        import boto3

        boto3.client("s3", endpoint_url=self.url, region_name=REGION, aws_access_key_id=KEY,
                     aws_secret_access_key=SECRET).create_bucket(Bucket=self.bucket)

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url + "/__reset", method="POST")).read()

    def stats(self) -> dict:
        return json.loads(urllib.request.urlopen(self.url + "/__stats").read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def catalog(self, folder: Path, prefix: str) -> dict[str, str]:
        return {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{folder / '.lakepub' / 'catalog.db'}",
                "warehouse": f"s3://{self.bucket}/{prefix}", "s3.endpoint": self.url,
                "s3.access-key-id": KEY, "s3.secret-access-key": SECRET, "s3.region": REGION}


def make_workspace(folder: Path, server: Server | None, stream_dir: Path | None = None, partition: str = "month",
                   prefix: str | None = None):
    """A workspace in ``folder``: local warehouse, or on ``server``'s bucket (under ``prefix``,
    default the folder's name); orders_daily partitioned by ``partition`` of its day."""
    from lakepub.workspace import Workspace

    ws = c.workspace(folder, stream_dir)
    dataset = folder / "catalog" / "datasets" / f"{c.DATASET}.yaml"
    dataset.write_text(dataset.read_text().replace("partition: month", f"partition: {partition}", 1))
    if server is not None:
        path = folder / "lakepub.yaml"
        config = yaml.safe_load(path.read_text())
        config["catalog"] = server.catalog(folder, prefix or folder.name)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    ws.close()
    return Workspace.open(folder)


class Counted:
    """Requests of a block (none for the local warehouse)."""

    def __init__(self, server: Server | None):
        self.server, self.stats = server, {"total": 0, "in_sequence": 0}

    def __enter__(self):
        if self.server:
            self.server.reset()
        return self

    def __exit__(self, *exc):
        if self.server:
            self.stats = self.server.stats()


def measure(label: str, server: Server | None, work: Path, args, run_stream: Path) -> dict:
    folder = work / label
    folder.mkdir()
    ws = make_workspace(folder / "hist", server, partition=args.partition, prefix=f"{label}-hist")
    hist = History(args.history)
    t0 = time.perf_counter()
    build(ws, hist, folder, min(args.history, args.build_batch))
    out: dict = {"build_s": time.perf_counter() - t0}
    rng = np.random.default_rng(args.seed)
    position = args.history
    paths = []
    for i in range(args.repeat + 2 + args.repeat):
        path = folder / f"batch-{i}.parquet"
        pq.write_table(hist.batch(args.batch, rng), path)
        paths.append(path)
    warm = []
    for i in range(args.repeat + 1):
        gc.collect()
        with Counted(server) as counted:
            t0, c0 = time.perf_counter(), time.process_time()
            res = ws.publish(c.DATASET, paths[i], start={"p0": position}, end={"p0": position + args.batch})
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        position += args.batch
        if i:  # the first one warms the process
            warm.append((seconds, counted.stats, cpu))
        c.log(f"  {label}: warm publish {i}: {seconds:.3f} s {counted.stats}, {len(res.partitions)} partitions")
    from lakepub.store.key_index import runs_of
    from lakepub.store.layout import ledger_id

    ledger = ws.catalog.load_table(ledger_id(ws.config.namespace, c.DATASET))
    runs = runs_of(ledger.current_snapshot()) or []
    out["ledger_rows"] = sum(r.rows for r in runs)
    out["index_bytes"] = sum(r.size or 0 for r in runs)
    ws.close()
    warm.sort(key=lambda x: x[0])
    out["warm_s"], out["warm_req"], _ = warm[len(warm) // 2]
    out["warm_cpu_s"] = sorted(w[2] for w in warm)[len(warm) // 2]
    out["warm_max_s"] = warm[-1][0]
    out["partitions"] = len(res.partitions)
    i = len(warm) + 1
    for tag, times in (("cold", 1), ("cold_cached", args.repeat)):
        cache = folder / "hist" / ".lakepub" / "cache"
        if tag == "cold" and cache.exists():
            shutil.rmtree(cache)
        runs = []
        for _ in range(times):
            argv = [sys.executable, "-c", _COLD, str(folder / "hist"), str(paths[i]), str(position),
                    str(position + args.batch)]
            with Counted(server) as counted:
                wall, printed = c.timed_process(argv, cwd=folder / "hist")
            i += 1
            position += args.batch
            seconds, cpu = map(float, printed.strip().splitlines()[-1].split())
            runs.append((seconds, wall, counted.stats, cpu))
            c.log(f"  {label}: {tag} publish (new process): {runs[-1][0]:.3f} s, process {wall:.2f} s {counted.stats}")
        runs.sort(key=lambda x: x[0])  # the median
        out[f"{tag}_s"], out[f"{tag}_wall_s"], out[f"{tag}_req"], _ = runs[len(runs) // 2]
        out[f"{tag}_cpu_s"] = sorted(r[3] for r in runs)[len(runs) // 2]
        out[f"{tag}_max_s"] = runs[-1][0]
    return out


def measure_warm(label: str, server: Server | None, work: Path, args, grain: str) -> dict:
    """The warm publish alone (history, then ``--repeat`` timed publishes after one warm-up) of
    orders_daily partitioned by ``grain``."""
    folder = work / f"{label}-{grain}"
    folder.mkdir()
    ws = make_workspace(folder / "hist", server, partition=grain, prefix=f"{label}-{grain}")
    hist = History(args.history)
    build(ws, hist, folder, min(args.history, args.build_batch))
    rng = np.random.default_rng(args.seed)
    position, warm = args.history, []
    for i in range(args.repeat + 1):
        path = folder / f"batch-{i}.parquet"
        pq.write_table(hist.batch(args.batch, rng), path)
        gc.collect()
        with Counted(server) as counted:
            t0 = time.perf_counter()
            res = ws.publish(c.DATASET, path, start={"p0": position}, end={"p0": position + args.batch})
            seconds = time.perf_counter() - t0
        position += args.batch
        if i:
            warm.append((seconds, counted.stats))
        c.log(f"  {label}: partition {grain}: warm publish {i}: {seconds:.3f} s {counted.stats}, {len(res.partitions)} files")
    ws.close()
    warm.sort(key=lambda x: x[0])
    return {"warm_s": warm[len(warm) // 2][0], "warm_req": warm[len(warm) // 2][1], "partitions": len(res.partitions)}


def measure_runs(work: Path, server: Server, args, run_stream: Path, local: dict, s3: dict) -> None:
    """``lakepub run`` of the stream, local and S3 alternately (``--run-repeat`` pairs, each on
    new workspaces), so that a machine whose load changes over the minutes affects both alike;
    the medians, and the median of each pair's ratio."""
    pairs = []
    for k in range(args.run_repeat):
        pair = {}
        for label, srv, out in (("local", None, local), ("s3", server, s3)):
            folder = work / label / f"run{k}"
            make_workspace(folder, srv, run_stream, partition=args.partition, prefix=f"{label}-run{k}").close()
            with Counted(srv) as counted:
                seconds, _ = c.timed_process(c.lakepub_argv("run", c.DATASET), cwd=folder)
            out.setdefault("run_all", []).append((seconds, counted.stats))
            pair[label] = seconds
            c.log(f"  {label}: run {args.run_events:,} events: {seconds:.3f} s {counted.stats}")
        pairs.append(pair["s3"] / pair["local"])
    for out in (local, s3):
        runs = sorted(out.pop("run_all"), key=lambda x: x[0])
        out["run_all_s"] = [r[0] for r in runs]
        out["run_s"], out["run_req"] = runs[len(runs) // 2]
    s3["run_ratios"] = pairs


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--latency-ms", type=float, default=30.0, help="added to every S3 request (default 30)")
    p.add_argument("--history", type=int, help="orders of history (default 1,000,000; --quick 20,000)")
    p.add_argument("--batch", type=int, help="events per measured publish (default 100,000; --quick 5,000)")
    p.add_argument("--build-batch", type=int, default=500_000, help="orders per history publish")
    p.add_argument("--repeat", type=int, help="timed warm publishes, and new-process publishes with "
                                              "the cache warm (median of each; default 5, --quick 1)")
    p.add_argument("--run-repeat", type=int, help="`lakepub run`s of the stream, each on a new workspace "
                                                  "(median; default 3, --quick 1)")
    p.add_argument("--partition", default="month", choices=("month", "year", "none"),
                   help="orders_daily's partition grain (default month: ~36 files per publish)")
    p.add_argument("--grains", default="", help="other grains (e.g. year,none) whose warm publish is also "
                                                "measured, local and S3, in the same run")
    p.add_argument("--run-events", type=int, help="events of the `lakepub run` stream (default 1,000,000; "
                                                  "--quick 20,000)")
    args = p.parse_args()
    # --quick: small and one repeat (each new-process publish costs ~2 s of imports on a shared 2-core machine)
    args.history = args.history or (20_000 if args.quick else 1_000_000)
    args.batch = args.batch or (5_000 if args.quick else 100_000)
    args.run_events = args.run_events or (20_000 if args.quick else 1_000_000)
    args.repeat = args.repeat or (1 if args.quick else 5)
    args.run_repeat = args.run_repeat or (1 if args.quick else 3)
    r = c.Report("object_store", "requests and time per publish on S3 (moto + latency) vs local", args.quick,
                 params={"latency_ms": args.latency_ms, "history": args.history, "batch": args.batch,
                         "run_events": args.run_events, "partition": args.partition, "repeat": args.repeat,
                         "run_repeat": args.run_repeat})
    server = Server(args.latency_ms)
    try:
        with c.scratch(args, "object_store") as work:
            run_stream, _ = c.stream(args, work, args.run_events)
            local = measure("local", None, work, args, run_stream)
            s3 = measure("s3", server, work, args, run_stream)
            measure_runs(work, server, args, run_stream, local, s3)
            grains = {g: {label: measure_warm(label, srv, work, args, g) for label, srv in
                          (("local", None), ("s3", server))} for g in filter(None, args.grains.split(","))}
    finally:
        server.stop()
    r.figures.update({"local": local, "s3": s3})
    r.section(f"{'':<34} {'local':>9} {'S3 +' + format(args.latency_ms, 'g') + ' ms':>12} {'requests (seq / all)':>22}")
    for key, label in (("warm", f"publish {args.batch:,} events, warm process"),
                       ("cold_cached", "publish in a new process, cache warm"),
                       ("cold", "publish in a new process, cache empty"),
                       ("run", f"`lakepub run` {args.run_events:,} events")):
        req = s3[f"{key}_req"]
        r.lines.append(f"  {label:<34} {local[key + '_s']:>8.2f}s {s3[key + '_s']:>11.2f}s "
                       f"{req['in_sequence']:>10} / {req['total']:<6}")
    r.lines.append(f"  (medians: publishes of {args.repeat}, runs of {args.run_repeat}; slowest: warm "
                   f"{local['warm_max_s']:.2f} / {s3['warm_max_s']:.2f} s, new process {local['cold_cached_max_s']:.2f} / "
                   f"{s3['cold_cached_max_s']:.2f} s, run {max(local['run_all_s']):.2f} / {max(s3['run_all_s']):.2f} s)")
    r.lines.append(f"  (history {args.history:,} orders, partition {args.partition}; the batch rewrites "
                   f"{s3['partitions']} partitions; a new "
                   f"process timed after its imports; whole process, cache warm: local {local['cold_cached_wall_s']:.2f} s, "
                   f"S3 {s3['cold_cached_wall_s']:.2f} s)")
    rows_m = s3["ledger_rows"] / 1e6
    extra = s3["cold_s"] - s3["cold_cached_s"]
    r.figure("index_bytes_per_row", s3["index_bytes"] / max(1, s3["ledger_rows"]), "key index on S3, bytes per ledger row",
             "B", f"{s3['index_bytes'] / 2**20:,.1f} MiB for {s3['ledger_rows']:,} rows")
    r.figure("cold_cache_extra_s", extra, "empty cache: extra seconds", "s",
             f"{extra / rows_m if rows_m else 0:.2f} s per 1M ledger rows at {rows_m:.1f}M rows "
             f"(the index runs and the {s3['partitions']} published files fetched)")
    r.figure("s3_warm_over_local", s3["warm_s"] / local["warm_s"], "warm publish, S3 / local", "x")
    r.target("warm publish requests in sequence <= 25", s3["warm_req"]["in_sequence"], "<=", 25)
    for grain, both in grains.items():
        b = both["s3"]
        r.lines.append(f"  {'warm publish, partition ' + grain:<34} {both['local']['warm_s']:>8.2f}s {b['warm_s']:>11.2f}s "
                       f"{b['warm_req']['in_sequence']:>10} / {b['warm_req']['total']:<6} ({b['partitions']} files; "
                       f"{args.partition}: {s3['partitions']})")
    r.figures["grains"] = grains
    ratios = sorted(s3["run_ratios"])
    r.figure("run_ratios", [round(x, 2) for x in s3["run_ratios"]], "run on S3 / local, each pair (run alternately)", "x")
    r.target("run on S3 / local <= 2.5 (median of the pairs)", ratios[len(ratios) // 2], "<=", 2.5)
    r.target("cold publish (cache warm) / warm publish <= 1.3", s3["cold_cached_s"] / s3["warm_s"], "<=", 1.3)
    r.figure("cold_over_warm_cpu", s3["cold_cached_cpu_s"] / s3["warm_cpu_s"],
             "new process / warm publish, CPU s (all threads)", "x",
             f"{s3['cold_cached_cpu_s']:.2f} s / {s3['warm_cpu_s']:.2f} s: the work, whatever the machine's load")
    r.emit(args)


if __name__ == "__main__":
    main()
