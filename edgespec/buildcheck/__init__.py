"""Whether this llama.cpp build works on this machine: CPU features and a crash-safe smoke test
(kept light: every command that loads a model imports `smoke`)."""
