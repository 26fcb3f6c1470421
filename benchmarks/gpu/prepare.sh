#!/bin/sh
# Make .gpucheck/ at the repository root: what the GPU check (check.sh) carries to a device
# machine, which reaches no network and takes at most 64 MiB (working tree included):
#
# - llama-cpp-python's source (the version pyproject.toml pins), without what a CUDA build of
#   its libraries never reads: llama.cpp's test vocabularies, docs, tools, examples, other
#   backends, and the sdist's own git history (73 MB as published, about 2.6 MB here);
# - wheels of what edgespec imports and that machine's image lacks (llguidance, diskcache) or
#   holds in another version (typer), for its Python 3.12;
# - the default pair's tokenizer (token list, merges, chat template), from the 1.5B's GGUF
#   (pulled into edgespec's store first: `edgespec pull`).
#
#   benchmarks/gpu/prepare.sh          (here, with the package index reachable)
#
# Run it in the checkout the device tool sends (the session's own), then name .gpucheck in the
# run's carry list. PYTHON: the interpreter with edgespec's dev extras (default .venv/bin/python).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/.gpucheck"
python="${PYTHON:-$root/.venv/bin/python}"
version=$(sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' "$root/pyproject.toml")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest/wheels"

if [ ! -f "$dest/llama-cpp-python-$version.tar.xz" ]; then
    "$python" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$version"
    tar xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
    src="$tmp/llama_cpp_python-$version"
    l="$src/vendor/llama.cpp"
    rm -rf "$src/.git" "$src/.github" "$src/examples" "$src/docker" "$src/docs" "$src/tests" \
        "$l/.git" "$l/.github" "$l/.devops" "$l/models" "$l/docs" "$l/media" "$l/benches" \
        "$l/tests" "$l/examples" "$l/tools" "$l/scripts" "$l/conversion" "$l/pocs" "$l/app"
    for b in sycl vulkan opencl hexagon metal et webgpu openvino cann virtgpu zdnn zendnn musa hip; do
        rm -rf "$l/ggml/src/ggml-$b"
    done
    tar cJf "$dest/llama-cpp-python-$version.tar.xz" -C "$tmp" "llama_cpp_python-$version"
fi

# The device's Python is 3.12 on x86-64 (.library/device/KINDS.md); one version of each.
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$dest/wheels" llguidance==1.9.1 diskcache==5.6.3 typer==0.29.2

if [ ! -f "$dest/tokenizer.json.gz" ]; then
    # `pull --offline` prints the pair's paths, target first, where both are on disk.
    paths=$(PYTHONPATH="$root" "$python" -m edgespec pull --offline) || {
        echo "prepare.sh: the default pair is not on disk: run \`edgespec pull\` first" >&2
        exit 1
    }
    target=$(echo "$paths" | head -n 1)
    PYTHONPATH="$root" "$python" "$root/benchmarks/gpu/random_gguf.py" tokenizer "$target" \
        "$dest/tokenizer.json.gz"
fi
du -sh "$dest"
echo "tracked and untracked files that travel with it:" \
    "$(cd "$root" && git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1)"
