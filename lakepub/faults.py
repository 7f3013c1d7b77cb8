"""Fault injection for crash tests: ``LAKEPUB_FAULT=<point>`` kills the process at that point.

Points, in protocol order:

* ``after-data-write``: the new data files and manifests are written, nothing is committed.
* ``before-pointer-swap``: the new table metadata files are written too; the catalog pointers
  have not moved.
* ``after-commit``: the catalog commit landed; the process dies before reporting success.

The process dies with SIGKILL, as abruptly as a machine loss: no ``finally`` block, no cleanup.
"""

from __future__ import annotations

import os
import signal

POINTS = ("after-data-write", "before-pointer-swap", "after-commit")


def fault_point(name: str) -> None:
    """Die here if ``LAKEPUB_FAULT`` names this point."""
    assert name in POINTS, name
    if os.environ.get("LAKEPUB_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
