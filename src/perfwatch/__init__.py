"""perfwatch: streaming performance-regression detection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfwatch.adapters.publisher import Publisher

__version__ = "0.1.0"
__all__ = ["Publisher", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `import perfwatch` does not load the Pulsar client.
    if name == "Publisher":
        from perfwatch.adapters.publisher import Publisher

        return Publisher
    raise AttributeError(f"module 'perfwatch' has no attribute {name!r}")
