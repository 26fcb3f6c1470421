#!/bin/sh
# Issue 54 on the heavy pair (F16 target, Q4_0 draft: verification flatter than the default
# pair's on a CPU), one round of the default pair's runs (../medians/run.sh), 60 s each, on a
# quiet machine, after recalibrating for this pair. From anywhere; the project venv first on
# PATH.
set -u
cd "$(dirname "$0")/../../../.."
out=${1:-benchmarks/serve/several/heavy}
pair=qwen2.5-coder-1.5b-f16
. benchmarks/serve/several/quiet.sh
begin $pair
for d in auto none; do
    load "mixed-idle-p2-$d-r1" --workload mixed --chat 0 --duration 60 -- $pair --parallel 2 --drafter $d
    load "mixed-chat-p2-$d-r1" --workload mixed --chat 1 --duration 60 -- $pair --parallel 2 --drafter $d
done
for n in 1 2 4; do
    for d in none auto; do
        load "tput-c$n-p$n-$d-r1" --workload throughput --clients $n --max-tokens 32 --duration 60 -- $pair --parallel $n --drafter $d
    done
done
echo "$(date +%T) done" >> $out/progress.txt
