#!/bin/sh
# The heavy-pair measurements quoted in docs/performance.md, in the order they ran: the F16
# target derived from the default one, the draft model of the default pair, held-out prompts
# (heldout3.jsonl, written once the code measured was frozen; dev.jsonl, heldout.jsonl and
# heldout2.jsonl were developed or replayed on).
#
#   sh benchmarks/heavy/run.sh [OUT_DIR]      (default: benchmarks/heavy/results)
#
# About 55 minutes on a 2-core CPU; the llama.cpp comparisons run one repeat on some of the
# prompts (PROMPTS_LLAMA, PROMPTS_LLAMA_T07) to fit that.
set -eu
cd "$(dirname "$0")/../.."
out="${1:-benchmarks/heavy/results}"
mkdir -p "$out"
edgespec=".venv/bin/edgespec"
python=".venv/bin/python"
# The F16 target (made here from the default one) and, unless DRAFT names another, the default
# pair's official draft: what the quoted runs used (the pair's own Q4_0 draft is faster, see
# results-q4draft/).
target=$($edgespec pull --target qwen2.5-coder-1.5b-instruct-f16)
draft=$($edgespec pull --target "${DRAFT:-qwen2.5-coder-0.5b-instruct-q4_k_m}")
llama=$(dirname "$(sh scripts/build_llama_tools.sh llama-speculative-simple)")
prompts="${PROMPTS:-benchmarks/heavy/heldout3.jsonl}"

# The calibration auto starts from (measured once on a quiet machine, then cached).
$edgespec plan --target "$target" --draft "$draft" --offline --json > "$out/plan.json"
bench() {  # NAME, then bench options
    name=$1
    shift
    $edgespec bench --target "$target" --draft "$draft" --offline --suite "$prompts" \
        --configs none,auto,model:k=4 --repeats 2 --max-tokens 128 "$@" \
        --json "$out/bench-$name.json" --markdown "$out/bench-$name.md"
}
llamacpp() {  # NAME, prompts, then options
    name=$1
    n=$2
    shift 2
    $python scripts/compare_llamacpp.py --llama-bin "$llama" --target "$target" --draft "$draft" \
        --suite "$prompts" --only draft-simple --tokens 128 --repeats 1 --prompts "$n" "$@" \
        --json "$out/llamacpp-$name.json" --markdown "$out/llamacpp-$name.md"
}
bench greedy
llamacpp greedy "${PROMPTS_LLAMA:-4}"
bench t07 --temperature 0.7 --top-p 0.95 --seed 1
llamacpp t07 "${PROMPTS_LLAMA_T07:-2}" --temperature 0.7 --top-p 0.95
$python benchmarks/heavy/first_token.py "$target" "$draft" > "$out/first-token-heavy.txt"
default_target=$($python -c 'from edgespec.models import files; from edgespec.models.registry import load_registry; print(files.fetch(load_registry().default_pair.target).path)')
$python benchmarks/heavy/first_token.py "$default_target" "$draft" > "$out/first-token-default.txt"
