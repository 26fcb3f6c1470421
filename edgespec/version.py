"""The package's version, in a module of its own: the library's lowest layers (the planner's
cache keys, the doctor's report) name it without importing the package's face."""

__version__ = "0.1.0"
