"""Reading the next batch of a ``run`` while the current one publishes (``ReadAhead``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import pyarrow as pa

from lakepub.positions import Vector
from lakepub.publish.publisher import PreparedBatch


class ReadAhead:
    """Read, validate and prepare the next batch in a background thread while the current one publishes.

    pyarrow's JSON reader and sort release the GIL, so on two cores the read overlaps the publish.
    Only one batch is read ahead (the first as soon as this is created); an invalid event still
    surfaces right after the batches before it.
    """

    def __init__(self, batches: Iterator[tuple[pa.Table, Vector, Vector]],
                 prepare: Callable[[pa.Table], PreparedBatch]):
        self._batches, self._prepare = batches, prepare
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-read")
        self._ahead = self._pool.submit(self._read)

    def _read(self) -> tuple[PreparedBatch, Vector, Vector] | None:
        item = next(self._batches, None)
        return None if item is None else (self._prepare(item[0]), item[1], item[2])

    def __iter__(self) -> Iterator[tuple[PreparedBatch, Vector, Vector]]:
        while (item := self._ahead.result()) is not None:
            self._ahead = self._pool.submit(self._read)
            yield item

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
