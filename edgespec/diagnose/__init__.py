"""Whether this installation works on this machine: CPU features, a crash-safe smoke test of
the llama.cpp build, and the checks behind `edgespec doctor`."""
