"""A new process's head start on an S3 warehouse (``store/s3_warm.py``, issue 16).

A publish on an S3 warehouse starts the pool threads and the late imports in the background
before it reads its batch, and opening the catalog does (``lakepub run``), before the first
table is loaded (it used to start at the first FileIO, after the catalog and the batch); a
local warehouse starts nothing. A refused batch still opens no catalog. The head start changes no data: the publishes of the
new process are read back by DuckDB equal to the oracle. What it imports, a publish needs, and
nothing else (rich, which pyiceberg imports only for a schema check's error table, was imported
in every new process)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import summary_rows, write_jsonl
from lakepub.config import CONFIG_FILE
from lakepub.init import init_workspace
from lakepub.store import s3_warm
from lakepub.workspace import Workspace
from test_janitor import DATASET, OFFSETS, batch_events, expected_rows, moto_endpoint  # noqa: F401 - fixture

# In a new process: open the workspace and its catalog, report whether the head start is
# running before any table was loaded (no FileIO made yet), then publish the batches given.
_PROCESS = """
import json, sys
from pyiceberg.io import pyarrow as pio
made = []
real = pio.PyArrowFileIO.__init__
def counting(self, *a, **k):
    made.append(type(self).__name__)
    real(self, *a, **k)
pio.PyArrowFileIO.__init__ = counting
from lakepub.store import s3_warm
from lakepub.workspace import Workspace
ws = Workspace.open(sys.argv[1])
ws.catalog
state = {"started": s3_warm._STARTED.is_set(), "file_ios_before": len(made)}
for path, start, end in json.loads(sys.argv[2]):
    ws.publish("orders_daily", path, start={"p0": start}, end={"p0": end})
state["file_ios_after"] = len(made)
state["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("rich", "numpy", "pyiceberg", "pyiceberg_core", "pyarrow"))
print(json.dumps(state))
"""


def _s3_workspace(root: Path, endpoint: str, bucket: str, tmp_path: Path) -> Path:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                 aws_secret_access_key="s").create_bucket(Bucket=bucket)
    init_workspace(root)
    config = yaml.safe_load((root / CONFIG_FILE).read_text())
    config["catalog"] = {"name": "lakepub", "type": "sql", "uri": f"sqlite:///{tmp_path / (bucket + '.db')}",
                         "warehouse": f"s3://{bucket}/wh", "s3.endpoint": endpoint, "s3.access-key-id": "k",
                         "s3.secret-access-key": "s", "s3.region": "us-east-1"}
    (root / CONFIG_FILE).write_text(yaml.safe_dump(config))
    return root


def _new_process(root: Path, batches: list[int], tmp_path: Path) -> dict:
    plan = [[str(write_jsonl(tmp_path / f"b{i}.jsonl", batch_events(i))), OFFSETS[i], OFFSETS[i + 1]] for i in batches]
    out = subprocess.run([sys.executable, "-c", _PROCESS, str(root), json.dumps(plan)], capture_output=True,
                         text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_s3_catalog_starts_the_head_start_before_any_table_is_loaded(moto_endpoint, tmp_path):  # noqa: F811
    root = _s3_workspace(tmp_path / "ws", moto_endpoint, "warm", tmp_path)
    first = _new_process(root, [0, 1, 2], tmp_path)
    assert first["started"] and first["file_ios_before"] == 0  # before the first FileIO
    assert first["file_ios_after"] > 0
    again = _new_process(root, [3, 4, 5], tmp_path)  # a new process with the cache warm
    assert again["started"] and again["file_ios_before"] == 0
    # What the head start imports, a publish needs; rich (pyiceberg's schema-check error table)
    # it does not, and no process should pay for it
    assert set(s3_warm.LATE_IMPORTS) <= set(again["modules"])
    assert "rich" not in again["modules"], "a partition-rewriting publish imported rich: drop this check if it now needs it"
    assert summary_rows(Workspace.open(root)) == expected_rows(6)  # read back by DuckDB: the oracle


_INVALID = """
import json, sys
from lakepub.errors import LakepubError
from lakepub.store import s3_warm
from lakepub.workspace import Workspace
ws = Workspace.open(sys.argv[1])
try:
    ws.publish("orders_daily", [{"order_id": "x", "version": "not a number"}], start={"p0": 0}, end={"p0": 1})
except LakepubError as exc:
    print(json.dumps({"started": s3_warm._STARTED.is_set(), "catalog_opened": "catalog" in ws.__dict__,
                      "error": type(exc).__name__}))
"""


def test_a_publish_starts_it_before_reading_its_batch_and_a_refused_batch_opens_no_catalog(moto_endpoint, tmp_path):  # noqa: F811
    root = _s3_workspace(tmp_path / "ws", moto_endpoint, "refused", tmp_path)
    out = subprocess.run([sys.executable, "-c", _INVALID, str(root)], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state == {"started": True, "catalog_opened": False, "error": state["error"]}  # validated before the catalog


def test_a_local_warehouse_starts_nothing(tmp_path):
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": f"file://{tmp_path / 'wh'}"}
    out = subprocess.run([sys.executable, "-c", "import sys, json; from lakepub.store import s3, s3_warm; "
                          "s3.configure(json.loads(sys.argv[1])); print(s3_warm._STARTED.is_set())", json.dumps(props)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_an_explicit_file_io_starts_nothing_at_configure():
    props = {"type": "sql", "uri": "sqlite://", "warehouse": "s3://b/wh", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
    out = subprocess.run([sys.executable, "-c", "import sys, json; from lakepub.store import s3, s3_warm; "
                          "s3.configure(json.loads(sys.argv[1])); print(s3_warm._STARTED.is_set())", json.dumps(props)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("module", s3_warm.LATE_IMPORTS)
def test_every_late_import_exists(module):
    """A renamed module (a pyarrow or pyiceberg upgrade) would silently lose its head start."""
    assert importlib.import_module(module) is not None




# A parent that opened an S3 workspace's catalog (the head start running, no publish of its own)
# forks a child that publishes. After the head start: the child inherits the pools' bookkeeping
# (idle threads) but not their threads, so its first upload waited forever for a thread. During
# it: the child inherits the lock of the module being imported, held by a thread it does not
# have, so its own import of that module waited forever (made certain here by a slow module put
# first in the head start's imports).
_FORKS = """
import json, multiprocessing, sys, threading, time
from lakepub.store import s3_warm
from lakepub.workspace import Workspace
root, path, start, end, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if when == "during":
    s3_warm.LATE_IMPORTS = ("slow_import",) + s3_warm.LATE_IMPORTS
Workspace.open(root).catalog  # the parent opens the catalog only: the head start runs
if when == "during":
    while "slow_import" not in sys.modules:
        time.sleep(0.001)
else:
    for thread in threading.enumerate():
        if thread.name == "lakepub-start-threads":
            thread.join()
def child():
    import slow_import, numpy.ma
    Workspace.open(root).publish("orders_daily", path, start={"p0": start}, end={"p0": end})
process = multiprocessing.get_context("fork").Process(target=child)
process.start()
process.join(60)
if process.is_alive():
    process.kill()
    print(json.dumps({"exitcode": "hung"}))
else:
    print(json.dumps({"exitcode": process.exitcode}))
"""


@pytest.mark.parametrize("when", ["after", "during"])
def test_a_child_forked_after_or_during_the_head_start_publishes(moto_endpoint, tmp_path, when):  # noqa: F811
    root = _s3_workspace(tmp_path / "ws", moto_endpoint, f"forked-{when}", tmp_path)
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(2)\n")
    path = write_jsonl(tmp_path / "b0.jsonl", batch_events(0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _FORKS, str(root), str(path), str(OFFSETS[0]), str(OFFSETS[1]), when],
                         capture_output=True, text=True, timeout=300, cwd=root, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"exitcode": 0}, out.stderr[-3000:]
    assert summary_rows(Workspace.open(root)) == expected_rows(1)  # read back by DuckDB: the oracle


# Every FileIO of the process (the catalog's, each table's with its own properties) uses one S3
# file system (an AWS client, ~30-40 ms each): they are keyed by the bucket and the s3.* /
# client.* properties alone (s3._fs_key), made once.
_FILE_SYSTEM = """
import json, sys, threading
from lakepub.store import s3
made = []
real = s3.LakepubFileIO._make_s3_fs
def recording(self, netloc):
    made.append(threading.current_thread().name)
    return real(self, netloc)
s3.LakepubFileIO._make_s3_fs = recording
from lakepub.workspace import Workspace
root, plan = sys.argv[1], json.loads(sys.argv[2])
ws = Workspace.open(root)
for path, start, end in plan:
    ws.publish("orders_daily", path, start={"p0": start}, end={"p0": end})
print(json.dumps({"made": len(made), "file_systems": len(s3._FILESYSTEMS)}))
"""


def test_every_fileio_of_a_process_shares_one_s3_file_system(moto_endpoint, tmp_path):  # noqa: F811
    root = _s3_workspace(tmp_path / "ws", moto_endpoint, "file-system", tmp_path)
    plan = [[str(write_jsonl(tmp_path / f"b{i}.jsonl", batch_events(i))), OFFSETS[i], OFFSETS[i + 1]] for i in (0, 1)]
    out = subprocess.run([sys.executable, "-c", _FILE_SYSTEM, str(root), json.dumps(plan)], capture_output=True,
                         text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"made": 1, "file_systems": 1}
    assert summary_rows(Workspace.open(root)) == expected_rows(2)  # read back by DuckDB: the oracle


# A thread of the parent is making a file system (its lock held) when another forks: the child
# makes its own instead of waiting for a thread it does not have.
_FORK_MID_MAKE = """
import json, multiprocessing, sys, threading
from lakepub.store import s3
props = json.loads(sys.argv[1])
key = s3._fs_key("bucket", props)
holding, done = threading.Event(), threading.Event()
def make_slowly():
    with s3._FS_LOCK:
        lock = s3._FS_MAKING.setdefault(key, threading.Lock())
    with lock:
        holding.set()
        done.wait()
maker = threading.Thread(target=make_slowly)
maker.start()
holding.wait()
def child():
    s3.LakepubFileIO(props)._initialize_s3_fs("bucket")
process = multiprocessing.get_context("fork").Process(target=child)
process.start()
process.join(60)
done.set()
maker.join()
print(json.dumps({"exitcode": "hung" if process.is_alive() else process.exitcode}))
if process.is_alive():
    process.kill()
"""


def test_a_child_forked_while_a_file_system_is_made_makes_its_own(moto_endpoint):  # noqa: F811
    props = {"s3.endpoint": moto_endpoint, "s3.access-key-id": "k", "s3.secret-access-key": "s", "s3.region": "us-east-1"}
    out = subprocess.run([sys.executable, "-c", _FORK_MID_MAKE, json.dumps(props)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"exitcode": 0}, out.stderr[-3000:]


# A process that ends right after the head start began (a refused batch, a short command, a
# script) exits cleanly. Session 11 had the head start make the S3 file system (an AWS client,
# in C++): an exit while it did, pyarrow finalizing S3 (its atexit), crashed the process
# (SIGSEGV, or abort "exception not rethrown"); that was reverted, and this keeps it out.
_EXIT_MID_MAKE = """
import sys, time
from lakepub.store import s3
props = {"warehouse": "s3://bucket/wh", "s3.endpoint": "http://127.0.0.1:9", "s3.access-key-id": "k",
         "s3.secret-access-key": "s", "s3.region": "us-east-1"}
s3.head_start(props)
time.sleep(float(sys.argv[1]))
print("exiting")
"""


def test_a_process_exiting_while_the_head_start_makes_the_file_system_exits_cleanly():
    for delay in ("0", "0", "0", "0.005", "0.02"):
        out = subprocess.run([sys.executable, "-c", _EXIT_MID_MAKE, delay], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        assert (out.returncode, out.stdout.strip()) == (0, "exiting"), (delay, out.returncode, out.stderr[-2000:])
