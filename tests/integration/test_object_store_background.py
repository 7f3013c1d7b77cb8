"""Background uploads on S3 and a run's deferred clean-up (store/s3.py, store/commit.py).

A publish on S3 closes its data files and key-index runs as soon as they are complete locally;
their uploads, the manifests' and the new metadata files' go up side by side, and the atomic
commit's pointer swap waits for every one of them. Inside ``Workspace.run`` a commit's version
hints and manifest clean-up finish while the next batch starts, each commit first waiting for
the previous one's. What must hold:

* nothing a swap names is missing: every slowed upload has finished before the swap;
* a failed data-file or run upload publishes nothing (a retry, exit 4), and a new process then
  publishes everything, equal to the oracle, DuckDB reading the table and ``verify --deep``;
* hints never go back in time and, once ``run`` returns, name each table's committed metadata.
"""

from __future__ import annotations

import threading
import time

import pytest

from lakepub.store import commit, s3, uploads
from lakepub.store.version_hint import hint_location
from lakepub.workspace import Workspace
from tests.integration.test_object_store import DATASET, _published, _published_oracle, _rerun_as_new_process, _workspace

pytestmark = pytest.mark.integration


def _slowed(monkeypatch, seconds: float, log: list, fail: str | None = None, client=None, bucket: str = ""):
    """Slow down (and with ``fail``, fail) every background upload of a data file (``parquet``)
    or key-index run (``arrow``), logging (kind, end time) when each one finished."""
    real_finish, real_later = s3._DiskTee._finish, s3.LakepubFileIO.upload_later

    def finish(self):
        time.sleep(seconds)
        real_finish(self)
        log.append(("parquet", time.perf_counter()))
        if fail == "parquet":
            client.delete_object(Bucket=bucket, Key=self._location.split("/", 3)[3])  # as if it never got there
            raise OSError("injected: connection reset during PutObject")

    def later(self, location, upload):
        def slow():
            time.sleep(seconds)
            upload()
            log.append(("arrow", time.perf_counter()))
            if fail == "arrow":
                client.delete_object(Bucket=bucket, Key=location.split("/", 3)[3])
                raise OSError("injected: connection reset during PutObject")
        return real_later(self, location, slow)

    monkeypatch.setattr(s3._DiskTee, "_finish", finish)
    monkeypatch.setattr(s3.LakepubFileIO, "upload_later", later)


def test_the_pointer_swap_waits_for_every_background_upload(s3_endpoint, make_workspace, tmp_path, monkeypatch):
    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "bgswap", events=900)
    finished: list = []
    in_flight_at_swap: list[list[str]] = []
    real_swap = commit._swap_pointers

    def swap(catalog, staged):
        with uploads._PENDING_LOCK:
            in_flight_at_swap.append(list(uploads._PENDING))
        real_swap(catalog, staged)

    _slowed(monkeypatch, 0.3, finished)
    monkeypatch.setattr(commit, "_swap_pointers", swap)
    result = ws.run(DATASET, max_batch=300)
    assert len(result.batches) == 3
    assert {kind for kind, _ in finished} == {"parquet", "arrow"}, finished  # both went up in the background
    assert in_flight_at_swap == [[], [], []]  # nothing a swap named was still on its way up
    assert _published(ws) == _published_oracle(ws)


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_failed_data_file_or_run_upload_publishes_nothing(s3_endpoint, make_workspace, tmp_path, monkeypatch, kind):
    from lakepub.errors import RetryableError

    ws = _workspace(make_workspace, tmp_path, s3_endpoint, f"bgfail{kind}", events=900)
    seen: list[int] = []
    ws.run(DATASET, max_batch=300, stop=lambda: bool(seen.append(1)) or len(seen) > 1)  # one batch
    before = _published(ws)
    monkeypatch.setattr(uploads, "_FAILED", [])  # this process's record of failed uploads, for this test only
    _slowed(monkeypatch, 0.0, [], fail=kind, client=s3_endpoint.client(), bucket=s3_endpoint.bucket)
    for _ in range(2):
        with pytest.raises(RetryableError, match="earlier upload") as refused:
            ws.run(DATASET, max_batch=300)
        assert refused.value.exit_code == 4
        assert _published(ws) == before
    _rerun_as_new_process(monkeypatch, ws)
    assert Workspace.open(ws.config.root).verify(DATASET, deep=True).ok


def test_a_runs_hints_never_go_back_and_name_the_committed_metadata(s3_endpoint, make_workspace, tmp_path,
                                                                     monkeypatch):
    """Each commit of a run first waits for the previous commit's hints (written meanwhile in the
    background, slowed here); when ``run`` returns every hint names its table's metadata file."""
    from lakepub.store.layout import ledger_id

    ws = _workspace(make_workspace, tmp_path, s3_endpoint, "bghints", events=1200)
    events: list[tuple[str, float, str]] = []
    lock = threading.Lock()
    real_hint, real_swap = commit.write_version_hint, commit._swap_pointers

    def hint(io, table_location, metadata_location):
        time.sleep(0.2)
        out = real_hint(io, table_location, metadata_location)
        with lock:
            events.append(("hint", time.perf_counter(), metadata_location))
        return out

    def swap(catalog, staged):
        with lock:
            events.append(("swap", time.perf_counter(), ""))
        real_swap(catalog, staged)

    monkeypatch.setattr(commit, "write_version_hint", hint)
    monkeypatch.setattr(commit, "_swap_pointers", swap)
    returned_at = []
    result = ws.run(DATASET, max_batch=300, on_batch=lambda r, p: returned_at.append(time.perf_counter()))
    done_at = time.perf_counter()
    assert len(result.batches) == 4
    swaps = [t for k, t, _ in events if k == "swap"]
    hints = [t for k, t, _ in events if k == "hint"]
    assert len(swaps) == 4 and len(hints) == 8  # two tables per commit
    for i in range(1, 4):  # commit i's swap only after both hints of commit i-1
        assert sorted(hints)[2 * i - 1] < swaps[i], events
    assert returned_at[0] < sorted(hints)[1], events  # the first batch returned before its hints were up
    assert max(hints) <= done_at  # and run waited for the last ones
    fresh = Workspace.open(ws.config.root)
    client = s3_endpoint.client()
    for ident in (ledger_id(fresh.config.namespace, DATASET), (fresh.config.namespace, DATASET)):
        table = fresh.catalog.load_table(ident)
        key = hint_location(table.metadata.location).split("/", 3)[3]
        body = client.get_object(Bucket=s3_endpoint.bucket, Key=key)["Body"].read().decode()
        assert table.metadata_location.endswith(f"/{body}.metadata.json"), (body, table.metadata_location)
    assert _published(fresh) == _published_oracle(fresh)


def test_file_ios_of_the_same_properties_share_one_s3_file_system(s3_endpoint):
    """pyiceberg makes a FileIO per table it loads; each made its own S3FileSystem (an AWS
    client) before: now one per (bucket, properties) for the process, and it still works."""
    props = {**s3_endpoint.s3_properties(), s3.BACKGROUND_UPLOADS: "true"}
    location = f"s3://{s3_endpoint.bucket}/shared-fs/x.bin"
    one, two = s3.LakepubFileIO(props), s3.LakepubFileIO(dict(props))
    other = s3.LakepubFileIO({**props, "s3.connect-timeout": "7"})
    assert one.fs_by_scheme("s3", s3_endpoint.bucket) is two.fs_by_scheme("s3", s3_endpoint.bucket)
    assert other.fs_by_scheme("s3", s3_endpoint.bucket) is not one.fs_by_scheme("s3", s3_endpoint.bucket)
    with one.new_output(location).create() as out:
        out.write(b"written through the shared client")
    assert two.new_input(location).open().read() == b"written through the shared client"


def test_deferred_cleanup_reports_the_runs_own_error_first():
    """A batch failing inside ``run`` is what ``run`` reports, not a clean-up error behind it;
    without one, a clean-up error is not lost."""
    from concurrent.futures import Future

    def failed_cleanup() -> None:
        future: Future = Future()
        future.set_exception(RuntimeError("clean-up failed"))
        commit._DEFERRED.get().append(future)

    with pytest.raises(ValueError, match="the batch's own error"):
        with commit.deferred_cleanup():
            failed_cleanup()
            raise ValueError("the batch's own error")
    with pytest.raises(RuntimeError, match="clean-up failed"):
        with commit.deferred_cleanup():
            failed_cleanup()
    assert commit._DEFERRED.get() is None  # outside a run: commits finish their clean-up themselves
