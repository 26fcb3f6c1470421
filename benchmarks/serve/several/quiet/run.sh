#!/bin/sh
# Issue 54 on a quiet machine (nothing else running): the runs of ../run.sh, 75 s each, after
# recalibrating (the cached calibration had been measured under load). From anywhere;
# the project venv first on PATH.
set -u
cd "$(dirname "$0")/../../../.."
out=${1:-benchmarks/serve/several/quiet}
. benchmarks/serve/several/quiet.sh
begin
load mixed-idle-p2-none --workload mixed --chat 0 --duration 75 -- --parallel 2 --drafter none
load mixed-chat-p2-none --workload mixed --chat 1 --duration 75 -- --parallel 2 --drafter none
load tput-c1-p1-none --workload throughput --clients 1 --max-tokens 32 --duration 75 -- --parallel 1 --drafter none
load tput-c4-p4-none --workload throughput --clients 4 --max-tokens 32 --duration 75 -- --parallel 4 --drafter none
load tput-c4-p4-auto --workload throughput --clients 4 --max-tokens 32 --duration 75 -- --parallel 4 --drafter auto
load tput-c1-p1-auto --workload throughput --clients 1 --max-tokens 32 --duration 75 -- --parallel 1 --drafter auto
load mixed-chat-p1-none --workload mixed --chat 1 --duration 75 -- --parallel 1 --drafter none
echo "$(date +%T) done" >> $out/progress.txt
