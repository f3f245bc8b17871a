"""Optional dependencies: import one, or say which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ImportError):
    """A feature needs a package of an optional extra that is not installed."""


def require(module: str, extra: str, *, feature: str) -> ModuleType:
    """Import `module`, or raise MissingDependency naming the pip extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{feature} needs the optional dependency {module}: pip install 'perfwatch[{extra}]'",
            name=module,
        ) from None
