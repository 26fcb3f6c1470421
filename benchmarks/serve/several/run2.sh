#!/bin/sh
# A second round of run.sh's key pairs, in the other order, and the editor on an idle server.
set -u
out=benchmarks/serve/several
load() { name=$1; shift; python benchmarks/serve/load.py --start --out "$out/$name.json" "$@" > /dev/null; }
load tput-c4-p4-none-r2 --workload throughput --clients 4 --max-tokens 32 --duration 120 -- --parallel 4 --drafter none
load tput-c1-p1-none-r2 --workload throughput --clients 1 --max-tokens 32 --duration 120 -- --parallel 1 --drafter none
load mixed-chat-p1-none-r2 --workload mixed --chat 1 --duration 150 -- --parallel 1 --drafter none
load mixed-chat-p2-none-r2 --workload mixed --chat 1 --duration 150 -- --parallel 2 --drafter none
load mixed-idle-p2-none-r2 --workload mixed --chat 0 --duration 150 -- --parallel 2 --drafter none
