"""polygrad's version (a module of its own, so that low layers can read it)."""

__version__ = "0.1.0"
