"""The counter study in examples/counters/: the README's `perfwatch compare` command on
it flags the regression and passes the good runs; the files are what the generator
writes; and `perfwatch publish` carries them to records that the check judges alike."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from perfwatch.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "counters"


def readme_compare_command() -> list[str]:
    """The README's `perfwatch compare` command on the example, globs expanded."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(
        line
        for line in re.findall(r"^perfwatch compare .*$", readme, flags=re.MULTILINE)
        if "examples/counters/" in line
    )
    words: list[str] = []
    for word in shlex.split(line)[1:]:
        words += sorted(str(p) for p in ROOT.glob(word)) if "*" in word else [word]
    return words


def run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout + result.stderr


def in_repository(args: list[str]) -> list[str]:
    return [str(ROOT / a) if a.startswith("examples/") else a for a in args]


def test_the_readme_command_flags_the_regression_and_passes_good_runs() -> None:
    command = in_repository(readme_compare_command())
    assert command[command.index("--target") + 1].endswith("tonight-regression.csv")
    code, out = run(command)
    assert code == 1, out
    assert out.startswith("REGRESSION")
    look_first = next(line for line in out.splitlines() if line.startswith("look first: "))
    assert "\\Process(checkout)\\% User Time" in look_first
    target = command.index("--target") + 1
    good = [*command[:target], str(EXAMPLE / "tonight-good.csv"), *command[target + 1 :]]
    code, out = run(good)
    assert code == 0, out
    assert out.startswith("no regression")
    baseline = sorted(EXAMPLE.glob("good-*.csv"))
    for held_out in baseline:
        others = [str(p) for p in baseline if p != held_out]
        code, out = run(["compare", "--baseline", *others, "--target", str(held_out)])
        assert code == 0, f"{held_out.name}: {out}"


def test_the_example_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("counter_example", EXAMPLE / "generate.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in EXAMPLE.glob("*.csv"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), name
    assert sum((EXAMPLE / name).stat().st_size for name in written) < 400_000


def test_published_records_are_judged_like_the_files(tmp_path: Path) -> None:
    """publish --dry-run: one record per file with the canonical counter names; compare
    on those records gives the verdicts it gives on the files."""
    files = [*sorted(EXAMPLE.glob("good-*.csv")), EXAMPLE / "tonight-regression.csv"]
    result = CliRunner().invoke(
        main, ["publish", "--dry-run", "--no-auto-identity", *map(str, files)]
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(files)
    for path, line in zip(files, lines, strict=True):
        (tmp_path / f"{path.stem}.jsonl").write_text(line + "\n")
    assert '"test":"good-1"' in lines[0] and '"metrics":{}' in lines[0]
    assert '"\\\\Process(checkout)\\\\% User Time"' in lines[0]
    baseline = [str(tmp_path / f"good-{i}.jsonl") for i in range(1, 6)]
    from_records = run(
        ["compare", "--baseline", *baseline, "--target", str(tmp_path / "tonight-regression.jsonl")]
    )
    from_files = run(
        [
            "compare",
            "--baseline",
            *map(str, files[:5]),
            "--target",
            str(files[5]),
        ]
    )
    assert from_records[0] == from_files[0] == 1
    assert from_records[1].splitlines()[:2] == from_files[1].splitlines()[:2]
