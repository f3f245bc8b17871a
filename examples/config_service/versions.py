"""Every version of the uploader as its own module: the baseline and each update.

An update is a unified diff against ``uploader.py`` (what a commit would
change). It is applied in memory and compiled under its own module name, so
the old and the new code can be profiled alternately in one process.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
BASELINE = "baseline"
UPDATES = ("bottleneck", "refactor")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def source(version: str) -> str:
    """Source text of ``uploader.py`` at this version."""
    text = (HERE / "uploader.py").read_text(encoding="utf-8")
    if version == BASELINE:
        return text
    if version not in UPDATES:
        raise ValueError(f"unknown version {version!r}; known: {BASELINE}, {', '.join(UPDATES)}")
    diff = HERE / "updates" / f"{version}.diff"
    return apply_unified_diff(text, diff.read_text(encoding="utf-8"), name=str(diff))


def load(version: str) -> ModuleType:
    """The uploader at this version, compiled as module ``config_service_<version>``."""
    name = f"config_service_{version}"
    if name in sys.modules:
        return sys.modules[name]
    module = ModuleType(name)
    module.__file__ = str(HERE / f"uploader.py@{version}")
    sys.modules[name] = module
    exec(compile(source(version), module.__file__, "exec"), module.__dict__)
    return module


def apply_unified_diff(text: str, diff: str, *, name: str = "<diff>") -> str:
    """Apply a unified diff exactly (every context and removed line must match)."""
    old = text.splitlines(keepends=True)
    new: list[str] = []
    position = 0  # next line of `old` not yet copied
    lines = diff.splitlines(keepends=True)
    index = 0
    while index < len(lines):
        match = _HUNK.match(lines[index])
        index += 1
        if match is None:
            continue
        start = int(match.group(1)) - 1 if match.group(2) != "0" else int(match.group(1))
        new.extend(old[position:start])
        position = start
        while index < len(lines) and lines[index][:1] in (" ", "-", "+", "\\"):
            line = lines[index]
            index += 1
            if line[0] == "+":
                new.append(line[1:])
            elif line[0] in (" ", "-"):
                if position >= len(old) or old[position] != line[1:]:
                    raise ValueError(f"{name}: hunk does not match line {position + 1}")
                if line[0] == " ":
                    new.append(line[1:])
                position += 1
    new.extend(old[position:])
    return "".join(new)
