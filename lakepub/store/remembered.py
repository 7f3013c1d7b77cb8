"""Bytes of write-once files kept in memory by location (``store/s3.py``): what this process
wrote or read of Iceberg's UUID-named metadata, manifests and manifest lists, served again without
a request. Bounded by bytes (least recently used dropped first; a file over a quarter of the limit
is not kept); safe across threads. Nothing here is ever stale: the files it holds never change."""

from __future__ import annotations

import threading
from collections import OrderedDict


class Remembered:
    """Bytes of immutable files by location, least recently used dropped beyond ``limit`` bytes."""

    def __init__(self, limit: int = 64 << 20):
        self.limit, self.size = limit, 0
        self._files: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, location: str) -> bytes | None:
        with self._lock:
            data = self._files.get(location)
            if data is not None:
                self._files.move_to_end(location)
            return data

    def put(self, location: str, data: bytes) -> bool:
        """Remember ``data`` (False: too large to be remembered)."""
        if len(data) > self.limit // 4:
            return False
        with self._lock:
            old = self._files.pop(location, None)
            self.size += len(data) - (len(old) if old is not None else 0)
            self._files[location] = data
            while self.size > self.limit:
                _, dropped = self._files.popitem(last=False)
                self.size -= len(dropped)
        return True

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self.size = 0
