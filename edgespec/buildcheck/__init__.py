"""Whether this llama.cpp build works on this machine: CPU features and a crash-safe smoke test
of the build (what `edgespec.doctor` reports, and what loading a model tests first).

Kept light: every command that loads a model imports `smoke` from here."""
