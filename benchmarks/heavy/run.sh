#!/bin/sh
# The heavy-pair measurements quoted in docs/performance.md, in the order they ran: the F16
# target derived from the default one, the draft model of the default pair, the held-out
# prompts (heldout.jsonl, written before any tuning; dev.jsonl was developed on).
#
#   sh benchmarks/heavy/run.sh [OUT_DIR]      (default: benchmarks/heavy/results)
set -eu
cd "$(dirname "$0")/../.."
out="${1:-benchmarks/heavy/results}"
mkdir -p "$out"
edgespec=".venv/bin/edgespec"
python=".venv/bin/python"
target=$($python scripts/heavy_pair.py)
draft=$($python -c 'from edgespec.models import files; from edgespec.models.registry import load_registry; print(files.fetch(load_registry().default_pair.draft).path)')
llama=$(dirname "$(sh scripts/build_llama_tools.sh llama-speculative-simple)")
prompts=benchmarks/heavy/heldout.jsonl

$edgespec plan --target "$target" --draft "$draft" --offline --recalibrate --json > "$out/plan.json"
for sampling in "greedy" "t07"; do
    case "$sampling" in
        greedy) args="" ;;
        t07) args="--temperature 0.7 --top-p 0.95 --seed 1" ;;
    esac
    # shellcheck disable=SC2086 # args is a list of options
    $edgespec bench --target "$target" --draft "$draft" --offline --suite "$prompts" \
        --configs none,auto,model:k=4 --repeats 3 --max-tokens 128 $args \
        --json "$out/bench-$sampling.json" --markdown "$out/bench-$sampling.md"
done
$python scripts/compare_llamacpp.py --llama-bin "$llama" --target "$target" --draft "$draft" \
    --suite "$prompts" --only draft-simple --tokens 96 --repeats 2 \
    --json "$out/llamacpp-greedy.json" --markdown "$out/llamacpp-greedy.md"
$python scripts/compare_llamacpp.py --llama-bin "$llama" --target "$target" --draft "$draft" \
    --suite "$prompts" --only draft-simple --tokens 96 --repeats 2 --prompts 3 \
    --temperature 0.7 --top-p 0.95 \
    --json "$out/llamacpp-t07.json" --markdown "$out/llamacpp-t07.md"
$python benchmarks/heavy/first_token.py "$target" "$draft" > "$out/first-token-heavy.txt"
default_target=$($python -c 'from edgespec.models import files; from edgespec.models.registry import load_registry; print(files.fetch(load_registry().default_pair.target).path)')
$python benchmarks/heavy/first_token.py "$default_target" "$draft" > "$out/first-token-default.txt"
