"""Whether this installation works on this machine: CPU features, a crash-safe smoke test of
the llama.cpp build, and the checks behind `edgespec doctor`.

Kept light: `diagnose` (all the doctor's checks) is imported from `edgespec.diagnose.checks`
when it runs, since every command imports `smoke` from here."""
