#!/bin/sh
# The runs of benchmarks/serve/several/README.md, one after another (each starts its own
# `edgespec serve` on the default pair and stops it). From the repository root.
set -u
out=benchmarks/serve/several
load() { name=$1; shift; python benchmarks/serve/load.py --start "$@" --out "$out/$name.json" > /dev/null; }
# An editor's 32-token completions: idle, beside a chat client's 512-token answers one at a
# time (--parallel 1, the server before slots), and in slots.
load mixed-idle-p2-none --workload mixed --chat 0 --duration 90 -- --parallel 2 --drafter none
load mixed-chat-p1-none --workload mixed --chat 1 --duration 90 -- --parallel 1 --drafter none
load mixed-chat-p2-none --workload mixed --chat 1 --duration 90 -- --parallel 2 --drafter none
# Total tokens/s of N clients' 128-token answers.
load tput-c1-p1-none --workload throughput --clients 1 --duration 60 -- --parallel 1 --drafter none
load tput-c4-p1-none --workload throughput --clients 4 --duration 60 -- --parallel 1 --drafter none
load tput-c4-p4-none --workload throughput --clients 4 --duration 60 -- --parallel 4 --drafter none
load tput-c1-p1-auto --workload throughput --clients 1 --duration 60 -- --parallel 1 --drafter auto
load tput-c4-p4-auto --workload throughput --clients 4 --duration 60 -- --parallel 4 --drafter auto
load tput-c2-p4-none --workload throughput --clients 2 --duration 60 -- --parallel 4 --drafter none
load tput-c2-p4-auto --workload throughput --clients 2 --duration 60 -- --parallel 4 --drafter auto
load mixed-idle-p2-auto --workload mixed --chat 0 --duration 90 -- --parallel 2 --drafter auto
load mixed-chat-p2-auto --workload mixed --chat 1 --duration 90 -- --parallel 2 --drafter auto
