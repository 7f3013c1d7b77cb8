"""Shared pieces of the benchmarks in ``scripts/bench``: arguments, machine line, streams, reports.

Every benchmark is a script run as ``python scripts/bench/<name>.py [--quick] [--json PATH]``:

* ``--quick``: a small run for CI (``tests/test_benchmarks_quick.py`` runs each once);
* full mode (the default): the sizes the README figures come from;
* ``--json PATH`` writes the report as JSON (``-``: JSON on stdout, the text report on stderr);
* ``--work DIR`` keeps scratch files there (default: a temporary folder, removed at the end);
* ``--cache DIR`` reuses generated landing streams between runs (``run_all.py`` sets it).

A report prints the machine line (cores, RAM, CPU model, Python/duckdb/pyiceberg/pyarrow
versions), every figure, each ratio measured in the same run, and each issue target as met or
missed.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
BASELINES = REPO / "scripts" / "baselines"
VENV_BIN = Path(sys.executable).parent
DATASET = "orders_daily"
SOURCE = "orders"
STREAM_DAYS = 1095  # 3 years
STREAM_PARTITIONS = 2

if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))


# --- arguments and scratch space ------------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small run for CI (asserting only that it completes)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-' for stdout)")
    p.add_argument("--work", type=Path, help="scratch folder (default: a temporary folder, removed at the end)")
    p.add_argument("--cache", type=Path, help="folder to reuse generated landing streams from")
    p.add_argument("--seed", type=int, default=7, help="stream generator seed")
    return p


@contextmanager
def scratch(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """The benchmark's scratch folder: ``--work/<name>`` (kept) or a temporary folder (removed)."""
    if args.work is not None:
        folder = Path(args.work).resolve() / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        yield folder
        return
    folder = Path(tempfile.mkdtemp(prefix=f"lakepub-bench-{name}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- machine ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import duckdb
    import pyarrow
    import pyiceberg

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {
        "lakepub": _git_version(),
        "cores": usable,
        "ram_bytes": ram,
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "pyiceberg": pyiceberg.__version__,
        "pyarrow": pyarrow.__version__,
    }


def _git_version() -> str:
    """The checkout's commit, with '+dirty' when lakepub/ has uncommitted changes."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lakepub"], cwd=REPO, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def machine_line(m: dict[str, Any]) -> str:
    ram = f"{m['ram_bytes'] / 2**30:.1f} GiB RAM" if m.get("ram_bytes") else "RAM unknown"
    return (f"{m['cores']} cores ({m['cpu']}), {ram}, {m['os']}, Python {m['python']}, "
            f"duckdb {m['duckdb']}, pyiceberg {m['pyiceberg']}, pyarrow {m['pyarrow']}; lakepub {m.get('lakepub')}")


# --- reports ---------------------------------------------------------------------------------


@dataclass
class Report:
    """Figures, ratios and targets of one benchmark run, printed as text and/or JSON."""

    benchmark: str
    title: str
    quick: bool
    params: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def section(self, title: str) -> None:
        self.lines.append(f"-- {title}")

    def figure(self, key: str, value: Any, label: str, unit: str = "", detail: str = "") -> Any:
        """Record a figure (``key`` in JSON) and a text line ``label  value unit  (detail)``."""
        self.figures[key] = value
        text = fmt(value)
        self.lines.append(f"  {label:<46} {text:>14} {unit:<10}{('  ' + detail) if detail else ''}".rstrip())
        return value

    def ratio(self, key: str, ours: float, base: float, label: str) -> float | None:
        value = ours / base if base else None
        self.figures[key] = value
        self.lines.append(f"  {label:<46} {fmt(value, 2):>14} x")
        return value

    def target(self, name: str, value: float | None, op: str, limit: float, why: str = "") -> bool:
        """A target of the issue: ``value op limit`` with op '>=' or '<='."""
        met = value is not None and (value >= limit if op == ">=" else value <= limit)
        self.targets.append({"name": name, "value": value, "op": op, "target": limit, "met": met, "why": why})
        return met

    def note(self, text: str) -> None:
        self.notes.append(text)

    def as_dict(self, m: dict[str, Any]) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark, "title": self.title, "mode": "quick" if self.quick else "full",
            "machine": m, "machine_line": machine_line(m), "params": self.params, "figures": self.figures,
            "targets": self.targets, "notes": self.notes,
            "seconds": round(time.perf_counter() - self.started, 2),
        }

    def text(self, m: dict[str, Any]) -> str:
        mode = "quick" if self.quick else "full"
        params = ", ".join(f"{k}={fmt(v)}" for k, v in self.params.items())
        out = [f"== {self.benchmark} ({mode}): {self.title}", f"machine: {machine_line(m)}"]
        if params:
            out.append(f"params: {params}")
        out += self.lines
        if self.targets:
            out.append("-- targets (of the issue each benchmark serves; see its docstring)")
            for t in self.targets:
                verdict = "MET" if t["met"] else "MISSED"
                out.append(f"  {t['name']:<46} {fmt(t['value'], 2):>14}   target {t['op']} {t['target']:g}"
                           f"   {verdict}{('  (' + t['why'] + ')') if t['why'] else ''}")
        for n in self.notes:
            out.append(f"note: {n}")
        out.append(f"({self.benchmark} took {time.perf_counter() - self.started:.1f} s)")
        return "\n".join(out)

    def emit(self, args: argparse.Namespace) -> None:
        m = machine()
        text = self.text(m)
        if args.json == "-":
            print(text, file=sys.stderr, flush=True)
            print(json.dumps(self.as_dict(m), indent=1, default=str), flush=True)
            return
        print(text, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(self.as_dict(m), indent=1, default=str))


def fmt(value: Any, digits: int | None = None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if digits is not None:
            return f"{value:,.{digits}f}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}"
    return str(value)


def log(msg: str) -> None:
    """Progress on stderr (kept out of the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- inputs ----------------------------------------------------------------------------------


def cached(args: argparse.Namespace, work: Path, name: str, make: Callable[[Path], dict[str, Any]]
           ) -> tuple[Path, dict[str, Any]]:
    """A generated stream folder ``name`` and its stats: from ``--cache`` if there, else ``make(folder)``."""
    if args.cache is not None:
        folder = Path(args.cache).resolve() / name
        done = folder / ".stats.json"
        if done.is_file():
            return folder, json.loads(done.read_text())
        if folder.exists():
            shutil.rmtree(folder)
    else:
        folder = work / name
    t0 = time.perf_counter()
    info = make(folder)
    log(f"generated {name} in {time.perf_counter() - t0:.1f} s -> {folder}")
    if args.cache is not None:
        (folder / ".stats.json").write_text(json.dumps(info))
    return folder, info


def stream(args: argparse.Namespace, work: Path, events: int, *, days: int = STREAM_DAYS,
           partitions: int = STREAM_PARTITIONS, seed: int | None = None, spread: bool = False,
           segment_size: int | None = None) -> tuple[Path, Any]:
    """A generated landing stream (``lakepub.generate.generate_stream``), from ``--cache`` if there.

    ``spread``: the drifting stream (days over the whole span in every batch); ``segment_size``:
    lines per segment file (default: the generator's)."""
    from lakepub.generate import generate_stream

    seed = args.seed if seed is None else seed
    extra = {"spread": True} if spread else {}
    if segment_size is not None:
        extra["segment_size"] = segment_size

    def make(folder: Path) -> dict[str, Any]:
        stats = generate_stream(folder, events=events, partitions=partitions, days=days, seed=seed, **extra)
        return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in stats.__dict__.items()}

    tag = ("-spread" if spread else "") + (f"-seg{segment_size}" if segment_size is not None else "")
    return cached(args, work, f"stream-e{events}-d{days}-p{partitions}-s{seed}{tag}", make)


def lakepub_argv(*args: str) -> list[str]:
    """The command line a user types: the ``lakepub`` entry point of this Python's environment."""
    script = VENV_BIN / "lakepub"
    return [str(script), *args] if script.is_file() else [sys.executable, "-m", "lakepub.cli", *args]


def timed_process(argv: list[str], *, cwd: Path | None = None, timeout: float = 1800) -> tuple[float, str]:
    """Wall seconds of one new process from its start to its exit, and its stdout; raises if it fails."""
    seconds, _cpu, out = timed_process_cpu(argv, cwd=cwd, timeout=timeout)
    return seconds, out


def timed_process_cpu(argv: list[str], *, cwd: Path | None = None, timeout: float = 1800) -> tuple[float, float, str]:
    """Like ``timed_process``, also the process's CPU seconds (user + system, all its threads):
    on a machine shared with other work, CPU seconds vary far less than wall seconds."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, proc.stdout


def workspace(folder: Path, stream_dir: Path | None = None):
    """``lakepub init`` into ``folder``; the landing source ``orders`` is a link to ``stream_dir``."""
    from lakepub.init import init_workspace
    from lakepub.workspace import Workspace

    init_workspace(folder)
    if stream_dir is not None:
        link = folder / "landing" / SOURCE
        if link.is_dir() and not link.is_symlink() and not any(link.iterdir()):
            link.rmdir()  # the empty folder `lakepub init` creates
        link.symlink_to(Path(stream_dir).resolve(), target_is_directory=True)
    return Workspace.open(folder)


def workspace_open(folder: Path):
    from lakepub.workspace import Workspace

    return Workspace.open(folder)


def load_baseline(name: str) -> ModuleType:
    """Import ``scripts/baselines/<name>.py`` by path."""
    path = BASELINES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"lakepub_baseline_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# --- timing and profiling --------------------------------------------------------------------


@contextmanager
def timed(out: dict[str, float], key: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        out[key] = time.perf_counter() - t0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


NESTED = "  of which: "  # label prefix of a phase nested inside another one (not summed)

# Cost centres of a publish, by the functions that own them: label -> [(file suffix, function)].
# Alternatives cover the core's refactorings (e.g. Transaction.overwrite -> store.write.replace_partitions; the
# generic path: publish/versioning.project, publish/datasets.DatasetWriter.rewrite, Publisher.load).
PHASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("read + validate JSONL (pyarrow)", [("lakepub/events.py", "read_jsonl_events")]),
    ("read + validate Parquet (pyarrow)", [("lakepub/events.py", "read_parquet_events")]),
    ("count landing records", [("lakepub/landing.py", "count_records")]),
    ("canonical sort + batch digest (identity)", [("lakepub/publish/publisher.py", "prepare")]),
    ("load tables (catalog)", [("lakepub/store/layout.py", "load_tables"),
                               ("lakepub/publish/publisher.py", "load")]),
    ("position check (snapshot summary)", [("lakepub/publish/publisher.py", "_check_position")]),
    ("ledger lookup (key index, else DuckDB join)", [("lakepub/publish/lookup.py", "rows")]),
    ("projection (numpy)", [("lakepub/publish/projection.py", "project"),
                            ("lakepub/publish/versioning.py", "project")]),
    ("key index run + merges", [("lakepub/publish/lookup.py", "runs_after")]),
    ("published rows + files (read when not kept)", [("lakepub/publish/published_state.py", "load")]),
    ("partition rewrite (merge deltas)", [("lakepub/publish/rewrite.py", "rewrite_partitions"),
                                          ("lakepub/publish/datasets.py", "rewrite")]),
    ("ledger append (waiting for its Parquet file + manifests)", [("pyiceberg/table/__init__.py", "append"),
                                                                  ("lakepub/publish/publisher.py", "_stage_ledger")]),
    ("replace published partitions (Parquet + manifest)", [("pyiceberg/table/__init__.py", "overwrite"),
                                                           ("lakepub/store/write.py", "replace_partitions")]),
    (NESTED + "pyiceberg scan planning (plan_files)", [("pyiceberg/table/__init__.py", "plan_files")]),
    ("commit (metadata + pointer swap)", [("lakepub/store/commit.py", "commit_atomically"),
                                          ("lakepub/store/commit.py", "commit_in_order")]),
    ("DuckDB connect + extension load", [("lakepub/duck.py", "_new_database")]),
]


def profile_call(fn: Callable[[], Any]) -> tuple[Any, pstats.Stats, float]:
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    try:
        result = fn()
    finally:
        prof.disable()
    return result, pstats.Stats(prof), time.perf_counter() - t0


def phase_times(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds spent in each of ``PHASES``: the largest cumulative time among the
    functions matching it (functions of one name may call each other, e.g. pyiceberg's
    ``plan_files``: adding their cumulative times would count the same time twice)."""
    out = {label: 0.0 for label, _ in PHASES}
    for (filename, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for label, owners in PHASES:
            if any(func == name and filename.endswith(suffix) for suffix, name in owners):
                out[label] = max(out[label], ct)
    return {label: seconds for label, seconds in out.items() if seconds > 0}


def top_functions(stats: pstats.Stats, n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` functions with the most own time (tottime), with their cumulative time."""
    rows = []
    for (filename, line, func), (_cc, ncalls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{_short(filename)}:{line}({func})", "own_s": tt, "cum_s": ct, "calls": ncalls})
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return rows[:n]


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/lakepub/", "/lib/python"):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return ("lakepub/" + tail) if marker == "/lakepub/" else tail
    return filename


def sampled_profile(fn: Callable[[], Any]) -> tuple[str, dict[str, float], float] | None:
    """Profile ``fn()`` with pyinstrument (a sampling profiler: little overhead) if it is installed.

    Returns (call tree text, seconds per ``PHASES`` label, wall seconds), or None without
    pyinstrument (it is optional)."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return None
    prof = Profiler(interval=0.002)
    t0 = time.perf_counter()
    prof.start()
    try:
        fn()
    finally:
        prof.stop()
    wall = time.perf_counter() - t0
    out = {label: 0.0 for label, _ in PHASES}
    root = prof.last_session.root_frame()

    def visit(frame, active: frozenset) -> None:
        path = (frame.file_path or "").replace("\\", "/")
        for label, owners in PHASES:
            if label not in active and any(frame.function == name and path.endswith(suffix) for suffix, name in owners):
                out[label] += frame.time
                active = active | {label}
        for child in frame.children:
            visit(child, active)

    if root is not None:
        visit(root, frozenset())
    text = prof.output_text(unicode=False, color=False, show_all=False)
    return text, {k: v for k, v in out.items() if v > 0}, wall


# --- files and memory ------------------------------------------------------------------------


def count_files(folder: Path, suffix: str | None = None) -> int:
    n = 0
    for _root, _dirs, names in os.walk(folder):
        n += sum(1 for name in names if suffix is None or name.endswith(suffix))
    return n


def table_files(table) -> dict[str, int]:
    """Data files and manifests of a pyiceberg table's current snapshot; snapshots and metadata log."""
    snap = table.current_snapshot()
    if snap is None:
        return {"data_files": 0, "manifests": 0, "snapshots": len(table.metadata.snapshots)}
    manifests = snap.manifests(table.io)
    data = sum(len(m.fetch_manifest_entry(table.io, discard_deleted=True)) for m in manifests)
    return {"data_files": data, "manifests": len(manifests), "snapshots": len(table.metadata.snapshots),
            "metadata_log": len(table.metadata.metadata_log) + 1}


def rss_now() -> dict[str, int]:
    """This process's current and peak resident set size (bytes), from /proc/self/status."""
    out = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"rss": out.get("VmRSS", 0), "peak": out.get("VmHWM", 0)}


def mib(n: float | None) -> float | None:
    return None if n is None else n / 2**20
