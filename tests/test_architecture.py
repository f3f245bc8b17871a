"""The package layering of docs/architecture.md, as `.importlinter` states it, holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lint_imports() -> str:
    """The `lint-imports` next to this interpreter (the test environment's), else on PATH."""
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.is_file() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports not found: install import-linter in the test environment")
    return found


def run(folder: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the `.importlinter` in `folder`."""
    return subprocess.run(
        [lint_imports(), "--no-cache"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_are_kept() -> None:
    result = run(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    """The check is not vacuous: a contract the code breaks is reported as broken."""
    config = tmp_path / ".importlinter"
    config.write_text(
        "[importlinter]\nroot_package = perfwatch\n\n"
        "[importlinter:contract:processor-without-state]\n"
        "name = the processor imports no state (false: it keeps its state there)\n"
        "type = forbidden\n"
        "source_modules =\n    perfwatch.processor\n"
        "forbidden_modules =\n    perfwatch.state\n"
    )
    result = run(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
