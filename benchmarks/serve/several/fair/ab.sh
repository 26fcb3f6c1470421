#!/bin/sh
# The batch's fair lock and one stepping thread (1cf4035) against the commit before it
# (907f31a), interleaved on a quiet machine: two clients in two slots and the editor beside a
# chat answer, `none`, 60 s each, two rounds (the second in the other order). BEFORE is a
# checkout of 907f31a (git worktree add BEFORE 907f31a); the project venv first on PATH.
#   sh benchmarks/serve/several/fair/ab.sh BEFORE
set -u
cd "$(dirname "$0")/../../../.."
after=$PWD
before=$(cd "$1" && pwd)
out=$after/benchmarks/serve/several/fair/ab
mkdir -p "$out"
run() {  # SIDE NAME LOAD_ARGS...
    side=$1; name=$2; shift 2
    tree=$after; [ "$side" = before ] && tree=$before
    echo "$(date +%T) $name-$side $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/progress.txt"
    (cd "$tree" && PYTHONPATH=$tree python benchmarks/serve/load.py --start \
        --out "$out/$name-$side.json" "$@" > "$out/$name-$side.log" 2>&1)
}
for round in 1 2; do
    sides="before after"; [ $round = 2 ] && sides="after before"
    for side in $sides; do
        run $side c2-none-r$round --workload throughput --clients 2 --max-tokens 32 --duration 60 -- --parallel 2 --drafter none
        run $side chat-none-r$round --workload mixed --chat 1 --duration 60 -- --parallel 2 --drafter none
    done
done
echo "$(date +%T) done" >> "$out/progress.txt"
