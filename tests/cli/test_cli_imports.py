"""What the common commands import: help and the offline paths must not load the heavy
stacks (statistics, machine learning, web, database, Pulsar client).

Each command runs in a fresh interpreter, which reports the modules it ended with.
How fast the commands are is measured by benchmarks/bench_cli_analyze.py, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfwatch.cli.main import COMMANDS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Never needed by the offline commands, nor by any help text.
HEAVY = ("statsmodels", "sklearn", "scipy.stats", "plotly", "starlette", "psycopg", "pulsar")
# Not needed to print help either.
NOT_FOR_HELP = (*HEAVY, "uvicorn", "matplotlib", "scipy", "numba", "jsonschema")

_REPORT_MODULES = """
import json, sys
from perfwatch.cli.main import main
try:
    main(sys.argv[2:], prog_name="perfwatch")
except SystemExit as stop:
    status = stop.code or 0
with open(sys.argv[1], "w") as report:
    json.dump({"status": status, "modules": sorted(sys.modules)}, report)
"""


def modules_after(tmp_path: Path, *args: str | Path) -> set[str]:
    """The modules loaded once `perfwatch ARGS` finished successfully, run in `tmp_path`
    without $PERFWATCH_CONFIG: no configuration file is found unless ARGS name one."""
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _REPORT_MODULES, str(report), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={name: value for name, value in os.environ.items() if name != "PERFWATCH_CONFIG"},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(report.read_text())
    assert result["status"] == 0, done.stderr
    return set(result["modules"])


def loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return [name for name in packages if name in modules]


def test_group_help_imports_no_command_module_and_no_numpy(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "--help")
    # the group and its error convention, no command
    assert {m for m in modules if m.startswith("perfwatch.cli.")} == {
        "perfwatch.cli.main",
        "perfwatch.cli.errors",
    }
    assert loaded(modules, (*NOT_FOR_HELP, "numpy")) == []


def test_group_help_lists_each_command_with_its_summary() -> None:
    from click.testing import CliRunner

    from perfwatch.cli.main import main

    output = CliRunner().invoke(main, ["--help"]).output
    for name, entry in COMMANDS.items():
        assert f"  {name}" in output and entry.summary in output


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_help_imports_nothing_heavy(tmp_path: Path, command: str) -> None:
    assert loaded(modules_after(tmp_path, command, "--help"), NOT_FOR_HELP) == []


def test_analyze_help_imports_no_numpy(tmp_path: Path) -> None:
    assert "numpy" not in modules_after(tmp_path, "analyze", "--help")


def test_analyze_of_a_csv_file_imports_nothing_heavy(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "analyze", EXAMPLES / "nightly.csv")
    assert loaded(modules, (*HEAVY, "jsonschema", "tqdm")) == []
    # no configuration file in use: the configuration model (pydantic) is not loaded
    assert loaded(modules, ("perfwatch.config", "pydantic")) == []


def test_analyze_with_a_config_file_reads_it(tmp_path: Path) -> None:
    config = tmp_path / "perfwatch.toml"
    config.write_text('[directions]\n"throughput*" = "higher_is_better"\n')
    modules = modules_after(tmp_path, "analyze", EXAMPLES / "nightly.csv", "--config", config)
    assert loaded(modules, ("perfwatch.config", "pydantic")) == ["perfwatch.config", "pydantic"]
    assert loaded(modules, HEAVY) == []


def test_publish_dry_run_imports_nothing_heavy(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "publish", "--dry-run", EXAMPLES / "nightly.jsonl")
    assert loaded(modules, HEAVY) == []
