"""Write, or check, the settings rows of the configuration table in docs/deploy.md.

The rows (key, default, meaning) come from the declarations in `perfwatch.config`;
the analyzer rows and the file-only tables after them are written by hand.

    python scripts/config_reference.py          # rewrite the rows in docs/deploy.md
    python scripts/config_reference.py --check  # exit 1 when they differ
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from perfwatch.config import setting_field, setting_keys, unset_meaning

DOCS = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"
HEADER = "| key | default | meaning |\n| --- | --- | --- |\n"


def default_cell(default: Any, unset: str | None) -> str:
    if default is None or default == "":
        if unset in (None, "none"):
            return "*(empty)*"
        return f"*(empty: {unset if ' ' in unset else f'`{unset}`'})*"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, tuple):
        return f"`{json.dumps(list(default))}`"
    return f"`{default}`"


def rows() -> str:
    lines = []
    for key in setting_keys():
        info = setting_field(key)
        cell = default_cell(info.default, unset_meaning(info))
        meaning = info.description
        if get_origin(info.annotation) is Literal:
            meaning += " One of " + ", ".join(f"`{v}`" for v in get_args(info.annotation)) + "."
        lines.append(f"| `{key}` | {cell} | {meaning} |\n")
    return "".join(lines)


def with_rows(text: str) -> str:
    """`text` with the table's rows up to the first `analyzer.` row replaced."""
    start = text.index(HEADER) + len(HEADER)
    end = text.index("| `analyzer.", start)
    return text[:start] + rows() + text[end:]


def main(argv: list[str]) -> int:
    text = DOCS.read_text(encoding="utf-8")
    wanted = with_rows(text)
    if argv == ["--check"]:
        if wanted != text:
            print(f"{DOCS}: the settings table differs from perfwatch.config; run {__file__}")
            return 1
        return 0
    DOCS.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
