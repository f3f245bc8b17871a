"""perfwatch: streaming performance-regression detection."""

__version__ = "0.1.0"
