#!/bin/sh
# The runs of benchmarks/serve/several/README.md, one after another (each starts its own
# `edgespec serve` on the default pair and stops it). From the repository root.
set -u
out=benchmarks/serve/several
load() { name=$1; shift; python benchmarks/serve/load.py --start --out "$out/$name.json" "$@" > /dev/null; }
# An editor's 32-token completions beside a chat client streaming a 512-token answer: in slots,
# and one request at a time (--parallel 1, the server before slots).
load mixed-chat-p2-none --workload mixed --chat 1 --duration 150 -- --parallel 2 --drafter none
load mixed-chat-p1-none --workload mixed --chat 1 --duration 150 -- --parallel 1 --drafter none
# Total tokens/s of clients asking for 32-token answers: one client, one at a time; 4 in slots.
load tput-c1-p1-none --workload throughput --clients 1 --max-tokens 32 --duration 120 -- --parallel 1 --drafter none
load tput-c4-p4-none --workload throughput --clients 4 --max-tokens 32 --duration 120 -- --parallel 4 --drafter none
load tput-c4-p4-auto --workload throughput --clients 4 --max-tokens 32 --duration 120 -- --parallel 4 --drafter auto
load tput-c1-p1-auto --workload throughput --clients 1 --max-tokens 32 --duration 120 -- --parallel 1 --drafter auto
