#!/bin/sh
# The engine's cost per token before and after this folder's commit, on a quiet machine:
# overhead.py from each tree, alternating (before, after, before, after), then the rounds'
# cost after prompts of 100 and 4,000 tokens the same way. BEFORE is a checkout of the commit
# this folder's README names as "before" (git worktree add BEFORE COMMIT).
# Usage: sh benchmarks/overhead/quiet/run.sh BEFORE
set -e
before="$1"
out=benchmarks/overhead/quiet
for run in 1 2; do
    for side in before after; do
        tree=$([ "$side" = before ] && echo "$before" || echo .)
        PYTHONPATH="$tree" .venv/bin/python "$tree/benchmarks/overhead/overhead.py" \
            --tokens 128 --repeats 7 --json "$out/$side-run$run.json" > /dev/null
        PYTHONPATH="$tree" .venv/bin/python "$tree/benchmarks/overhead/overhead.py" \
            --contexts 100,4000 --tokens 128 --repeats 5 --configs none,model,auto \
            --json "$out/$side-ctx$run.json" > /dev/null
    done
done
