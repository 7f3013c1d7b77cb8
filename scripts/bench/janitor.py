"""Benchmark 5: janitor: orphan scan and deletion over a warehouse of 100,000 files, local and S3.

For each backend a workspace is published from a small 3-year stream in many batches (so there
are snapshots to expire and superseded files), then orphan files are planted under both tables'
data folders until the warehouse holds ``--files`` files. The janitor then runs once:
``lakepub.maintenance.run_janitor(ws, ["orders_daily"], JanitorOptions(older_than_s=0))`` with
``now`` a minute ahead (every unreferenced file is past the grace). Its ``FileStore`` is wrapped
to time the listing and the deletions exactly:

* scan  = list every file + load metadata + compute the referenced set + classify (+ expiry);
* delete = the store's delete calls (``os.remove`` locally, batched ``DeleteObjects`` on S3).

Baseline in the same run: the same number of orphans is planted again and a plain listing
(``os.walk`` + ``os.stat`` / ``list_objects_v2``) and deletion (``os.remove`` / ``DeleteObjects``)
without any metadata work is timed. Local files are flushed (``os.sync``) before each run: real
orphans are on disk, and unlinking never-flushed files is several times cheaper.

S3 is a moto server that this script starts in a child process on a free loopback port and stops
at the end; the SQL catalog stays in a local SQLite file. The orphans are put straight into the
server's in-memory backend (setup only: over HTTP moto takes ~200 puts/s); the janitor then lists
and deletes over HTTP like against any S3 endpoint. Without ``lakepub.maintenance`` (older
checkouts) only the plain baseline is timed (said so in the report).

    python scripts/bench/janitor.py [--quick] [--json PATH] [--files N] [--skip-s3]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

import common as c

KEY_ID, SECRET, REGION = "bench-key", "bench-secret", "us-east-1"


class TimedStore:
    """A FileStore wrapper timing ``list`` (time inside the inner iterator) and ``delete``."""

    def __init__(self, inner):
        self.inner = inner
        self.list_s = self.delete_s = 0.0
        self.listed = self.deleted = self.delete_calls = 0

    def list(self, prefix: str):
        it = iter(self.inner.list(prefix))
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                self.list_s += time.perf_counter() - t0
                return
            self.list_s += time.perf_counter() - t0
            self.listed += 1
            yield item

    def delete(self, paths):
        t0 = time.perf_counter()
        failed = self.inner.delete(paths)
        self.delete_s += time.perf_counter() - t0
        self.deleted += len(paths) - len(failed)
        self.delete_calls += 1
        return failed

    def __getattr__(self, name: str):  # the rest of the FileStore protocol (folders, prune, touch), untimed
        return getattr(self.inner, name)


def publish_state(ws, stream_dir: Path, max_batch: int) -> int:
    run = ws.run(c.DATASET, max_batch=max_batch)
    return len(run.batches)


def table_locations(ws) -> list[str]:
    from lakepub.store.layout import ledger_id, summary_id

    ns = ws.config.namespace
    return [ws.catalog.load_table(i).location() for i in (summary_id(ns, c.DATASET), ledger_id(ns, c.DATASET))]


def orphan_names(n: int, locations: list[str]) -> list[str]:
    """``n`` orphan locations spread over both tables' data folders, 100 subfolders each."""
    tag = uuid.uuid4().hex[:8]
    return [f"{locations[i % len(locations)].rstrip('/')}/data/orphan-{(i // 2) % 100:03d}/"
            f"{tag}-{i:07d}.parquet" for i in range(n)]


# --- local ----------------------------------------------------------------------------------


def plant_local(ws, n: int) -> float:
    t0 = time.perf_counter()
    payload = b"PAR1" + b"\0" * 60
    for loc in orphan_names(n, table_locations(ws)):
        path = loc[len("file://"):]
        try:
            with open(path, "wb") as fh:
                fh.write(payload)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(payload)
    os.sync()  # real orphans are old, on disk: deleting unflushed files would be much cheaper
    return time.perf_counter() - t0


def local(r: c.Report, args, work: Path, stream_dir: Path, total: int) -> None:
    ws = c.workspace(work / "ws-local", stream_dir)
    c.log("local: publishing ...")
    publishes = publish_state(ws, stream_dir, args.max_batch)
    wh = work / "ws-local" / ".lakepub" / "warehouse"
    n = max(0, total - c.count_files(wh))
    c.log(f"local: planting {n:,} orphan files ...")
    plant_s = plant_local(ws, n)
    before = c.count_files(wh)
    ours = _measure(r, "local", ws, "file", None, before, n, publishes, plant_s)
    r.figure("local_files_after", c.count_files(wh), "local: files left in the warehouse")
    c.log(f"local: planting {n:,} orphan files again for the plain baseline ...")
    plant_local(ws, n)
    _baseline(r, "local", ws, "file", ours)


# --- S3 on a moto server --------------------------------------------------------------------


class MotoServer:
    """A moto server (S3) in a child process on a free loopback port.

    The child also takes commands on stdin: ``plant`` puts objects straight into its in-memory
    S3 backend (fast setup; the benchmark itself only talks HTTP to the server)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--moto-child"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.stop()
            raise SystemExit("moto server did not start (is moto[server] installed?)")
        self.url = line.split()[1]

    def plant(self, bucket: str, keys: list[str]) -> float:
        self.proc.stdin.write(json.dumps({"op": "plant", "bucket": bucket, "keys": keys}) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline())["seconds"])

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def _moto_child() -> None:
    """The child side of MotoServer."""
    import logging

    from moto.server import ThreadedMotoServer
    from moto.s3.models import s3_backends

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    print(f"ready http://{host}:{port}", flush=True)
    body = b"PAR1" + b"\0" * 60
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            t0 = time.perf_counter()
            backend = next(s3_backends[a]["global"] for a in list(s3_backends.keys())
                           if cmd["bucket"] in s3_backends[a]["global"].buckets)
            for key in cmd["keys"]:
                backend.put_object(cmd["bucket"], key, body)
            print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
    finally:
        server.stop()


def s3_client(url: str):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=url, region_name=REGION, aws_access_key_id=KEY_ID,
                        aws_secret_access_key=SECRET,
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))


def s3(r: c.Report, args, work: Path, stream_dir: Path, total: int) -> None:
    server = MotoServer()
    url = server.url
    try:
        client = s3_client(url)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=bucket)
        props = {"s3.endpoint": url, "s3.access-key-id": KEY_ID, "s3.secret-access-key": SECRET,
                 "s3.region": REGION}
        root = work / "ws-s3"
        ws = c.workspace(root, stream_dir)
        cfg = yaml.safe_load((root / "lakepub.yaml").read_text())
        cfg["catalog"] = {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}",
                          "warehouse": f"s3://{bucket}/wh", **props}
        (root / "lakepub.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        from lakepub.workspace import Workspace

        ws = Workspace.open(root)
        c.log("s3: publishing ...")
        publishes = publish_state(ws, stream_dir, args.max_batch)
        existing = _count_keys(client, bucket, "wh/")
        n = max(0, total - existing)
        c.log(f"s3: planting {n:,} orphan objects in the moto server's backend ...")
        keys = [loc.split(f"s3://{bucket}/", 1)[1] for loc in orphan_names(n, table_locations(ws))]
        plant_s = server.plant(bucket, keys)
        before = existing + len(keys)  # (listing 100,000 keys on moto takes ~40 s: not done twice)
        ours = _measure(r, "s3", ws, "s3", props, before, n, publishes, plant_s)
        r.figure("s3_files_after", _count_keys(client, bucket, "wh/"), "s3: objects left in the warehouse")
        c.log(f"s3: planting {n:,} orphan objects again for the plain baseline ...")
        server.plant(bucket, [loc.split(f"s3://{bucket}/", 1)[1] for loc in orphan_names(n, table_locations(ws))])
        _baseline(r, "s3", ws, "s3", ours, client=client, bucket=bucket)
    finally:
        server.stop()


def _count_keys(client, bucket: str, prefix: str) -> int:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sum(len(page.get("Contents", [])) for page in pages)


# --- the measurement ------------------------------------------------------------------------


def _measure(r: c.Report, tag: str, ws, scheme: str, props, before: int, planted: int, publishes: int,
             plant_s: float) -> dict | None:
    """The janitor (lakepub.maintenance.run_janitor) over the warehouse; None if it is not available."""
    try:
        from lakepub.maintenance import JanitorOptions, run_janitor
        from lakepub.maintenance.filestore import LocalFileStore, S3FileStore
    except ImportError:
        r.note(f"{tag}: lakepub.maintenance is not importable: only the plain list + delete is timed")
        return None
    inner = LocalFileStore() if scheme == "file" else S3FileStore.from_properties(props)
    store = TimedStore(inner)
    c.log(f"{tag}: janitor over {before:,} files ...")
    t0 = time.perf_counter()
    report = run_janitor(ws, [c.DATASET], JanitorOptions(older_than_s=0), now=time.time() + 60,
                         stores={scheme: store})
    total_s = time.perf_counter() - t0
    totals = report.totals()
    scan_s = total_s - store.delete_s
    removed = totals["files_removed"]
    r.section(f"{tag}: lakepub janitor, {before:,} files in the warehouse ({planted:,} planted orphans; state "
              f"from {publishes} publishes; planting took {plant_s:.1f} s)")
    r.figure(f"{tag}_files_listed", store.listed, f"{tag}: files listed")
    r.figure(f"{tag}_list_s", store.list_s, f"{tag}: listing (FileStore.list)", "s",
             f"{store.listed / max(store.list_s, 1e-9):,.0f} files/s")
    r.figure(f"{tag}_scan_s", scan_s, f"{tag}: scan (list + metadata + classify + expiry)", "s")
    r.figure(f"{tag}_scan_files_per_s", store.listed / scan_s, f"{tag}: scan rate", "files/s")
    r.figure(f"{tag}_snapshots_expired", totals["snapshots_expired"], f"{tag}: snapshots expired")
    r.figure(f"{tag}_files_removed", removed, f"{tag}: files deleted", "", f"{store.delete_calls} delete calls")
    r.figure(f"{tag}_delete_s", store.delete_s, f"{tag}: deletion (FileStore.delete)", "s")
    r.figure(f"{tag}_delete_files_per_s", removed / max(store.delete_s, 1e-9), f"{tag}: delete rate", "files/s")
    r.figure(f"{tag}_total_s", total_s, f"{tag}: whole janitor run", "s")
    r.figure(f"{tag}_files_per_s", store.listed / total_s, f"{tag}: end to end (files listed / run time)", "files/s")
    if removed < planted:
        raise SystemExit(f"{tag}: janitor removed {removed} files, fewer than the {planted} orphans")
    return {"scan_files_per_s": store.listed / scan_s, "delete_files_per_s": removed / max(store.delete_s, 1e-9)}


def _baseline(r: c.Report, tag: str, ws, scheme: str, ours: dict | None, client=None, bucket=None) -> None:
    """Plain baseline: list every file (os.walk + stat / list_objects_v2), delete the planted orphans
    (os.remove / DeleteObjects of 1,000 keys); no metadata reads, no safety checks."""
    locations = table_locations(ws)
    t0 = time.perf_counter()
    if scheme == "file":
        files = []
        for loc in locations:
            for folder, _dirs, names in os.walk(loc[len("file://"):]):
                for name in names:
                    full = os.path.join(folder, name)
                    os.stat(full)
                    files.append(full)
        orphans = [f for f in files if "/orphan-" in f]
        t1 = time.perf_counter()
        for f in orphans:
            os.remove(f)
        how = "os.walk + os.stat, os.remove"
    else:
        files = [o["Key"] for loc in locations
                 for page in client.get_paginator("list_objects_v2").paginate(
                     Bucket=bucket, Prefix=loc.split(f"s3://{bucket}/", 1)[1].rstrip("/") + "/")
                 for o in page.get("Contents", [])]
        orphans = [k for k in files if "/orphan-" in k]
        t1 = time.perf_counter()
        for i in range(0, len(orphans), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in orphans[i:i + 1000]],
                                                         "Quiet": True})
        how = "boto3 list_objects_v2, delete_objects of 1,000 keys"
    t2 = time.perf_counter()
    scan, delete = len(files) / (t1 - t0), len(orphans) / max(t2 - t1, 1e-9)
    r.section(f"{tag}: plain baseline ({how}) over the same {len(files):,} files, no metadata")
    r.figure(f"{tag}_plain_scan_files_per_s", scan, f"{tag}: plain list rate", "files/s", f"{t1 - t0:.2f} s")
    r.figure(f"{tag}_plain_delete_files_per_s", delete, f"{tag}: plain delete rate", "files/s", f"{t2 - t1:.2f} s")
    if ours is not None:
        r.ratio(f"{tag}_scan_ratio", ours["scan_files_per_s"], scan, f"{tag}: janitor scan / plain list rate")
        r.ratio(f"{tag}_delete_ratio", ours["delete_files_per_s"], delete, f"{tag}: janitor delete / plain delete rate")


def main() -> None:
    if sys.argv[1:] == ["--moto-child"]:
        return _moto_child()
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--files", type=int, help="files in the warehouse (default 100,000; --quick 2,000)")
    p.add_argument("--events", type=int, help="events published first (default 200,000; --quick 4,000)")
    p.add_argument("--max-batch", type=int, help="batch size of that publish (default 10,000; --quick 2,000)")
    p.add_argument("--skip-s3", action="store_true")
    p.add_argument("--skip-local", action="store_true")
    args = p.parse_args()
    total = args.files or (2_000 if args.quick else 100_000)
    events = args.events or (4_000 if args.quick else 200_000)
    args.max_batch = args.max_batch or (2_000 if args.quick else 10_000)
    r = c.Report("janitor", "orphan scan and deletion, files/s, local folder and S3 (moto server)", args.quick,
                 params={"files": total, "events": events, "max_batch": args.max_batch})
    with c.scratch(args, "janitor") as work:
        stream_dir, _ = c.stream(args, work, events)
        if not args.skip_local:
            local(r, args, work, stream_dir, total)
        if not args.skip_s3:
            s3(r, args, work, stream_dir, total)
    r.emit(args)


if __name__ == "__main__":
    main()
