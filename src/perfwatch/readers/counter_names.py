"""Counter names in one form, whatever file they came from.

The same counter is written ``\\\\WEB01\\Process(java)\\% Processor Time`` by perfmon,
relog and typeperf (the host first), and often the same way in a plain CSV export or a
record; a run recorded on another machine names another host. So every reader passes
its names through ``canonical_counter_names``: surrounding blanks go, and when every
counter path of a file names one host, the ``\\\\HOST`` prefix goes too, leaving
``\\Process(java)\\% Processor Time``. Paths from several hosts keep their hosts, since
then the host is what tells two counters apart. Other names are kept as they are.
"""

from __future__ import annotations

from collections.abc import Sequence


def is_counter_path(name: str) -> bool:
    """Whether ``name`` is a full Windows counter path, ``\\\\HOST\\Object\\Counter``."""
    return name.startswith("\\\\") and name.count("\\") >= 4


def counter_host(name: str) -> str:
    """The host of a full counter path, as Windows compares it (case-insensitive)."""
    return name[2:].split("\\", 1)[0].lower()


def canonical_counter_names(names: Sequence[str]) -> list[str]:
    """The canonical form of one file's counter names (see the module's documentation)."""
    stripped = [name.strip() for name in names]
    hosts = {counter_host(name) for name in stripped if is_counter_path(name)}
    if len(hosts) != 1:
        return stripped
    return [
        "\\" + name[2:].split("\\", 1)[1] if is_counter_path(name) else name for name in stripped
    ]


def first_duplicate(names: Sequence[str]) -> tuple[int, int] | None:
    """The positions of the first name that appears twice, or None."""
    seen: dict[str, int] = {}
    for position, name in enumerate(names):
        if name in seen:
            return seen[name], position
        seen[name] = position
    return None
