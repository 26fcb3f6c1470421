#!/bin/sh
# Issue 54 on a quiet machine (nothing else running): the runs of ../run.sh, 75 s each, after
# recalibrating (the cached calibration had been measured under load). From anywhere;
# the project venv first on PATH.
set -u
cd "$(dirname "$0")/../../../.."
export PYTHONPATH=.
out=${1:-benchmarks/serve/several/quiet}
date > $out/start.txt; uptime >> $out/start.txt
edgespec plan --recalibrate --offline > $out/plan.txt 2>&1
load() { name=$1; shift; echo "$(date +%T) $name $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/progress.txt; python benchmarks/serve/load.py --start --out "$out/$name.json" "$@" > $out/$name.log 2>&1; }
load mixed-idle-p2-none --workload mixed --chat 0 --duration 75 -- --parallel 2 --drafter none
load mixed-chat-p2-none --workload mixed --chat 1 --duration 75 -- --parallel 2 --drafter none
load tput-c1-p1-none --workload throughput --clients 1 --max-tokens 32 --duration 75 -- --parallel 1 --drafter none
load tput-c4-p4-none --workload throughput --clients 4 --max-tokens 32 --duration 75 -- --parallel 4 --drafter none
load tput-c4-p4-auto --workload throughput --clients 4 --max-tokens 32 --duration 75 -- --parallel 4 --drafter auto
load tput-c1-p1-auto --workload throughput --clients 1 --max-tokens 32 --duration 75 -- --parallel 1 --drafter auto
load mixed-chat-p1-none --workload mixed --chat 1 --duration 75 -- --parallel 1 --drafter none
echo "$(date +%T) done" >> $out/progress.txt
