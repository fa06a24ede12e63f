"""The package version, importable from any layer (vkinfer/__init__.py re-exports it)."""

__version__ = "0.1.0"
