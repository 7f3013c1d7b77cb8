"""A moto S3 server that adds a fixed latency to every request and counts the requests.

A stand-in for real S3's first-byte latency (20-50 ms) on a local machine: each request sleeps
``--latency-ms`` before moto answers it. The server runs in its own process (so its work does
not share the benchmark's GIL) and answers two paths of its own:

* ``GET /__stats``: JSON ``{"total", "in_sequence", "by_method", "busy_s"}`` since the last reset;
* ``GET /__log``: every request since the last reset, ``[method, path?query, start, end]``;
* ``POST /__reset``: zero the counters.

``in_sequence`` is the longest chain of requests each of which started after the previous one
had finished (the greatest set of pairwise non-overlapping request intervals, found greedily by
earliest end): the round trips a client paid one after another, whatever ran in parallel
beside them. ``busy_s`` is the time at least one request was in flight.

    python scripts/bench/s3_latency_server.py --latency-ms 30   # prints "READY http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections import Counter


class LatencyCounter:
    """WSGI middleware: sleep, then forward to ``app``; record each request's interval."""

    def __init__(self, app, latency_s: float):
        self.app, self.latency_s = app, latency_s
        self._lock = threading.Lock()
        self._intervals: list[tuple[float, float, str, str]] = []

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/__stats":
            body = json.dumps(self.stats()).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if path == "/__log":  # every request since the reset: [method, path, start, end] (diagnosis)
            with self._lock:
                body = json.dumps([[k, p, round(s, 4), round(e, 4)] for s, e, k, p in self._intervals]).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if path == "/__reset":
            with self._lock:
                self._intervals = []
            start_response("204 No Content", [])
            return [b""]
        start = time.perf_counter()
        if self.latency_s:
            time.sleep(self.latency_s)
        # The response is built (moto is synchronous) before the interval ends.
        body = b"".join(self.app(environ, start_response))
        kind = environ.get("REQUEST_METHOD", "?")
        with self._lock:
            self._intervals.append((start, time.perf_counter(), kind, path + "?" + environ.get("QUERY_STRING", "")))
        return [body]

    def stats(self) -> dict:
        with self._lock:
            intervals = sorted(self._intervals, key=lambda i: i[1])
        chain, last_end = 0, float("-inf")
        for start, end, *_ in intervals:  # greedy by earliest end: the longest non-overlapping chain
            if start >= last_end:
                chain, last_end = chain + 1, end
        busy, cur_s, cur_e = 0.0, None, None
        for start, end, *_ in sorted(intervals):
            if cur_e is None or start > cur_e:
                busy += (cur_e - cur_s) if cur_e is not None else 0.0
                cur_s, cur_e = start, end
            else:
                cur_e = max(cur_e, end)
        busy += (cur_e - cur_s) if cur_e is not None else 0.0
        return {"total": len(intervals), "in_sequence": chain,
                "by_method": dict(Counter(i[2] for i in intervals)), "busy_s": round(busy, 4)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = LatencyCounter(DomainDispatcherApplication(create_backend_app), args.latency_ms / 1000)
    server = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)
    host, port = server.server_address[:2]
    print(f"READY http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
