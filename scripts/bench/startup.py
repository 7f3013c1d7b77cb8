"""Benchmark 7: process start of the ``lakepub`` commands (issue 10), vs a bare Python process.

Every figure is a new process, as a user's shell starts it: ``lakepub --help``, ``status``,
``log orders_daily``, ``query "SELECT count(*) ..."`` and ``run orders_daily`` with nothing new
(a publishing command's fixed cost), on a small real workspace (a generated stream published
first), timed from the start of the process to its exit. The commands' runs are interleaved
(round robin, ``--runs`` rounds, the median counts) so a load spike on a shared machine hits all
of them alike. The baseline is the floor ``python -c pass`` measured in the same rounds; the
ratio is command / floor. Also printed: ``import lakepub.cli`` as a process, and where each
command's imports go (``python -X importtime``: own import time summed per top-level package;
the sum over all packages is the import total).

``status``, ``log`` and ``query`` take the quick read path (``lakepub/quick``) once the full path
has remembered the workspace and stored the figures of the published snapshot (each command runs
once with ``LAKEPUB_QUICK=0`` before the rounds, as a user's first command after a publish does);
the same commands with ``LAKEPUB_QUICK=0`` are timed in the same rounds, and the ratio quick /
full is printed. CPU seconds (user + system of the process) are reported next to the wall
seconds: on a shared machine they move far less.

    python scripts/bench/startup.py [--quick] [--json PATH] [--runs N]
"""

from __future__ import annotations

import os
import subprocess
import sys

import common as c

TARGET_S = 0.25  # issue 10: commands that do not publish start in <= 0.25 s
QUERY = f"SELECT count(*) AS days FROM {c.DATASET}"


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, help="rounds of every command, the median counts (default 9; --quick 2)")
    p.add_argument("--events", type=int, help="events published into the workspace first (default 20,000)")
    args = p.parse_args()
    runs = args.runs or (2 if args.quick else 9)
    events = args.events or (5_000 if args.quick else 20_000)
    r = c.Report("startup", "seconds from process start to exit of lakepub commands vs `python -c pass`", args.quick,
                 params={"runs": runs, "events": events})
    with c.scratch(args, "startup") as work:
        stream_dir, _ = c.stream(args, work, events)
        ws = c.workspace(work / "ws", stream_dir)
        ws.run(c.DATASET, max_batch=max(1, events // 4))
        w = ["-w", str(work / "ws")]
        full = ["env", "LAKEPUB_QUICK=0"]
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import lakepub.cli": [sys.executable, "-c", "import lakepub.cli"],
            "lakepub --help": c.lakepub_argv("--help"),
            "lakepub status": c.lakepub_argv(*w, "status"),
            "lakepub log": c.lakepub_argv(*w, "log", c.DATASET),
            "lakepub query": c.lakepub_argv(*w, "query", QUERY),
            "lakepub run (nothing new)": c.lakepub_argv(*w, "run", c.DATASET),
            "full path: lakepub status": [*full, *c.lakepub_argv(*w, "status")],
            "full path: lakepub log": [*full, *c.lakepub_argv(*w, "log", c.DATASET)],
            "full path: lakepub query": [*full, *c.lakepub_argv(*w, "query", QUERY)],
        }
        for name in ("status", "log", "query"):  # the full path remembers what the quick path reads
            c.timed_process(commands[f"full path: lakepub {name}"], cwd=work)
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for n in range(runs):
            c.log(f"round {n + 1}/{runs} ...")
            for name, argv in commands.items():
                wall, used, _ = c.timed_process_cpu(argv, cwd=work)
                seconds[name].append(wall)
                cpu[name].append(used)
        imports = {name: _imports(argv) for name, argv in commands.items() if "lakepub " in name}
        load = os.getloadavg()

    floor = c.median(seconds["python -c pass"])
    r.section(f"new process, start to exit (median of {runs} interleaved rounds)")
    for name, values in seconds.items():
        key = _key(name)
        value = r.figure(f"{key}_s", c.median(values), name, "s",
                         f"min {min(values):.3f}, max {max(values):.3f}; CPU {c.median(cpu[name]):.3f} s")
        if name != "python -c pass":
            r.ratio(f"{key}_ratio", value, floor, f"  {name} / python -c pass")
    r.section("quick read path vs full path (same rounds)")
    for name in ("status", "log", "query"):
        r.ratio(f"{name}_quick_vs_full", r.figures[f"{_key('lakepub ' + name)}_s"],
                r.figures[f"{_key('full path: lakepub ' + name)}_s"], f"  lakepub {name}: quick / full path (wall)")
        r.ratio(f"{name}_quick_vs_full_cpu", c.median(cpu[f"lakepub {name}"]),
                c.median(cpu[f"full path: lakepub {name}"]), f"  lakepub {name}: quick / full path (CPU)")
    r.figures["load_average"] = list(load)
    r.section("where the imports go (python -X importtime; own time summed per top-level package)")
    for name, packages in imports.items():
        total = sum(packages.values())
        top = sorted(packages.items(), key=lambda kv: -kv[1])[:6]
        r.figure(f"{_key(name)}_import_s", total, f"{name}: imports", "s",
                 ", ".join(f"{pkg} {s:.3f}" for pkg, s in top))
        r.figures[f"{_key(name)}_imports"] = dict(top)
    for name in ("lakepub --help", "lakepub status", "lakepub log", "lakepub query"):
        r.target(f"{name} <= {TARGET_S} s", r.figures[f"{_key(name)}_s"], "<=", TARGET_S)
    r.emit(args)


def _key(name: str) -> str:
    """JSON key of a command: ``lakepub run (nothing new)`` -> ``run_nothing_new``."""
    words = "".join(ch if ch.isalnum() else " " for ch in name.replace("lakepub ", "")).split()
    return "_".join(words)


def _imports(argv: list[str]) -> dict[str, float]:
    """Seconds of own import time per top-level package of one run of ``argv`` (``-X importtime``)."""
    prefix = argv[:2] if argv[0] == "env" else []
    argv = argv[len(prefix):]
    if argv[0].endswith("/lakepub"):
        argv = [sys.executable, "-X", "importtime", "-m", "lakepub.cli", *argv[1:]]
    else:
        argv = [argv[0], "-X", "importtime", *argv[1:]]
    proc = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=300)
    out: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        own, _cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        if not own.isdigit():
            continue  # the header line
        top = name.split(".")[0]
        out[top] = out.get(top, 0.0) + int(own) / 1e6
    return out


if __name__ == "__main__":
    main()
