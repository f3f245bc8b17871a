"""Data bundled with perfwatch: the demo's generated history."""
