"""The publish's (entity, version) match between a batch and its ledger rows."""

from __future__ import annotations

import numpy as np

from lakepub.publish.versioning import _match


def test_version_match_equals_intersect1d():
    """``versioning._match`` (searchsorted over the sorted batch keys) finds what
    ``np.intersect1d(..., return_indices=True)`` finds: same pairs, same order, the first of equal
    ledger keys; with batch keys unsorted, and versions outside [0, 2**32) (ranked instead)."""
    def reference(ag, av, bg, bv):
        ranks = np.unique(np.concatenate([av, bv]), return_inverse=True)[1].astype(np.int64).reshape(-1)
        a_key, b_key = (ag << 32) | ranks[:len(av)], (bg << 32) | ranks[len(av):]
        return np.intersect1d(a_key, b_key, return_indices=True)[1:]

    rng = np.random.default_rng(7)
    for trial in range(1500):
        pairs = {(int(g), int(v)) for g, v in zip(rng.integers(0, 20, 40), rng.integers(1, 4, 40))}
        pairs = sorted(pairs) if trial % 2 else list(rng.permutation(sorted(pairs)).tolist())
        pairs = pairs[:int(rng.integers(0, len(pairs) + 1))]
        ag = np.array([p[0] for p in pairs], dtype=np.int64).reshape(-1)
        av = np.array([p[1] for p in pairs], dtype=np.int64).reshape(-1)
        n = int(rng.integers(0, 60))
        bg, bv = rng.integers(0, 20, n).astype(np.int64), rng.integers(1, 4, n).astype(np.int64)
        if trial % 5 == 0 and n:
            bv[0] = 1 << 40
        if trial % 7 == 0 and n:
            bv[-1] = -2
        got, want = _match(ag, av, bg, bv), reference(ag, av, bg, bv)
        assert all(np.array_equal(x, y) for x, y in zip(got, want)), trial
