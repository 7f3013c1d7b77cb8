"""Process start: `import lakepub.cli` (what every `lakepub ...` process does first) loads no heavy
library; each command imports what it runs with (issue 10).

A correctness test of the import structure, not a timed test: the seconds are measured by
``scripts/bench/startup.py``. Each check runs in a fresh interpreter, since this test process has
long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pyiceberg", "sqlalchemy", "duckdb", "pyarrow", "numpy", "pydantic", "sqlglot", "yaml", "strictyaml")


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\nimport json\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_library():
    assert _loaded_after("import lakepub.cli") == []


def test_help_of_every_command_loads_no_heavy_library():
    code = ("from click.testing import CliRunner\nfrom lakepub.cli import main\n"
            "for args in ([], *([name] for name in main.commands)):\n"
            "    res = CliRunner().invoke(main, [*args, '--help'])\n"
            "    assert res.exit_code == 0, (args, res.output)\n"
            "assert len(main.commands) >= 15, sorted(main.commands)")
    assert _loaded_after(code) == []


def test_the_package_api_is_still_there_on_first_use():
    # `from lakepub import Workspace` loads the workspace (and pyiceberg) only then
    assert _loaded_after("import lakepub\nassert lakepub.LakepubError") == []
    loaded = _loaded_after("from lakepub import Workspace\nassert Workspace.open")
    assert {"pyiceberg", "pyarrow"} <= set(loaded)


def test_the_maintenance_package_api_is_still_there_on_first_use():
    import lakepub.maintenance as maintenance
    from lakepub.maintenance import janitor

    assert sorted(maintenance.__all__) == sorted(maintenance._HOME)  # noqa: SLF001
    for name in maintenance.__all__:
        assert getattr(maintenance, name) is not None
    assert maintenance.run_janitor is janitor.run_janitor
    assert janitor.JanitorOptions().older_than_s == maintenance.DEFAULT_OLDER_THAN_S == 3 * 86400
    assert _loaded_after("import lakepub.maintenance.cli") == []


def test_a_publish_on_the_key_index_path_does_not_load_duckdb(tmp_path):
    # `lakepub run` imports only what it uses: pyiceberg and pyarrow, not DuckDB (its views are for reads)
    code = (f"from pathlib import Path\nfrom lakepub.init import init_workspace\n"
            f"from lakepub.generate import generate_stream\nfrom lakepub.workspace import Workspace\n"
            f"root = Path({str(tmp_path / 'ws')!r})\ninit_workspace(root)\n"
            f"generate_stream(root / 'landing' / 'orders', events=3000, days=60, seed=3)\n"
            f"run = Workspace.open(root).run('orders_daily', max_batch=1000)\n"
            f"assert run.events == 3000 and len(run.batches) == 3, run\n")
    loaded = _loaded_after(code)
    assert "pyiceberg" in loaded and "pyarrow" in loaded and "duckdb" not in loaded, loaded


def test_read_commands_on_the_quick_path_load_no_catalog_library(tmp_path):
    # status, log and query as new processes, once the full path has remembered the workspace
    # (lakepub/quick): no pyiceberg, SQLAlchemy, pyarrow, numpy or pydantic; query loads DuckDB only
    from click.testing import CliRunner

    from lakepub.cli import main
    from lakepub.generate import generate_stream
    from lakepub.init import init_workspace

    root = tmp_path / "ws"
    init_workspace(root)
    generate_stream(root / "landing" / "orders", events=600, days=20, seed=3)
    commands = {"status": ["status"], "log": ["log", "orders_daily"],
                "query": ["query", "SELECT count(*) AS n FROM orders_daily"]}
    for args in (["run", "orders_daily", "--max-batch", "200"], *commands.values()):
        res = CliRunner().invoke(main, ["-w", str(root), *args], env={"LAKEPUB_QUICK": "0"})
        assert res.exit_code == 0, res.output
    for name, args in commands.items():
        code = (f"import os, sys\nos.environ['LAKEPUB_QUICK'] = 'trace'\nsys.argv = ['lakepub', '-w', {str(root)!r}, "
                f"*{args!r}]\nfrom lakepub.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n    assert not e.code\n")
        loaded = _loaded_after(code)
        assert loaded == (["duckdb"] if name == "query" else []), (name, loaded)
