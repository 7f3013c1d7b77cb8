"""A/B: a 1M-event `lakepub run` on S3 (moto +30 ms) with two lakepub checkouts, interleaved.

Each round runs, on fresh workspaces: local (checkout B), S3 with checkout A, S3 with checkout B;
it reports per run wall s, CPU s (user+sys of the process), requests in sequence / all, and the
S3/local ratio of each checkout. Used for issue 16's single PutObject of large key-index runs
(store/single_put.py): A = main, B = this worktree.

    python scripts/bench/run_single_put_ab.py --a /work/main --b . [--rounds 3] [--cache /tmp/oscache]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402
from object_store import Server, make_workspace  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--cache", default="/tmp/oscache")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    args.work, args.quick = None, False
    server = Server(30)
    work = Path(tempfile.mkdtemp(prefix="single-put-ab-"))
    stream, _ = c.stream(args, work, args.events)
    results: dict[str, list] = {}
    try:
        for k in range(args.rounds):
            for label, repo, srv in (("local-B", args.b, None), ("s3-A", args.a, server), ("s3-B", args.b, server)):
                folder = work / f"{label}-{k}"
                make_workspace(folder, srv, stream, prefix=f"{label}-{k}").close()
                if srv:
                    srv.reset()
                env_path = os.environ.get("PYTHONPATH")
                os.environ["PYTHONPATH"] = str(Path(repo).resolve())
                try:
                    wall, cpu, _ = c.timed_process_cpu([sys.executable, "-m", "lakepub.cli", "run", c.DATASET], cwd=folder)
                finally:
                    if env_path is None:
                        os.environ.pop("PYTHONPATH")
                    else:
                        os.environ["PYTHONPATH"] = env_path
                st = srv.stats() if srv else {"in_sequence": 0, "total": 0}
                results.setdefault(label, []).append((wall, cpu, st["in_sequence"], st["total"]))
                print(f"round {k} {label}: {wall:.2f} s wall, {cpu:.2f} s CPU, {st['in_sequence']} / {st['total']} requests",
                      flush=True)
    finally:
        server.stop()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    local = [r[0] for r in results["local-B"]]
    for label in ("s3-A", "s3-B"):
        rs = results[label]
        ratios = [r[0] / lo for r, lo in zip(rs, local)]
        print(f"{label}: median wall {med([r[0] for r in rs]):.2f} s, CPU {med([r[1] for r in rs]):.2f} s, "
              f"in sequence {med([r[2] for r in rs])}, ratio to local (same round) median {med(ratios):.2f}x "
              f"{[round(x, 2) for x in ratios]}")
    print(f"local-B: median wall {med(local):.2f} s")


if __name__ == "__main__":
    main()
