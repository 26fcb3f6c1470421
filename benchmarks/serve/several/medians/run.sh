#!/bin/sh
# Issue 54's goals as medians: three rounds of every run (60 s each), the order reversed in
# the second round, on a quiet machine, after recalibrating. From anywhere; the project venv
# first on PATH. The editor's completions beside a chat answer (2 slots) and on an idle server,
# for `auto` (the server's default) and `none`; total tokens/s of 1, 2 and 4 clients, each in
# as many slots (1 client: one request at a time).
set -u
cd "$(dirname "$0")/../../../.."
out=${1:-benchmarks/serve/several/medians}
. benchmarks/serve/several/quiet.sh
begin
runs="idle-auto chat-auto idle-none chat-none c1-none c2-none c4-none c1-auto c2-auto c4-auto"
reversed="c4-auto c2-auto c1-auto c4-none c2-none c1-none chat-none idle-none chat-auto idle-auto"
for round in 1 2 3; do
    order=$runs; [ $round = 2 ] && order=$reversed
    for run in $order; do
        case $run in
            idle-*) load "mixed-idle-p2-${run#idle-}-r$round" --workload mixed --chat 0 --duration 60 -- --parallel 2 --drafter "${run#idle-}" ;;
            chat-*) load "mixed-chat-p2-${run#chat-}-r$round" --workload mixed --chat 1 --duration 60 -- --parallel 2 --drafter "${run#chat-}" ;;
            c*) n=$(echo "$run" | cut -c2); d=${run#c?-}
                load "tput-c$n-p$n-$d-r$round" --workload throughput --clients "$n" --max-tokens 32 --duration 60 -- --parallel "$n" --drafter "$d" ;;
        esac
    done
done
echo "$(date +%T) done" >> $out/progress.txt
