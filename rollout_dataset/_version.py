"""The package's version: the one definition (`rollout_dataset.__version__` reads it; the modules that
record it import it from here, never from the package root)."""

__version__ = "0.1.0"
