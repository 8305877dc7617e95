"""The package's version (pyproject.toml's), readable without installing the package and without importing it whole."""

__version__ = "0.1.0"
