#!/bin/sh
# Set up edgespec in a virtual environment at .venv (the repository root), building llama.cpp
# so that it cannot crash on the machine it was built on.
#
#   scripts/install.sh          the tool
#   scripts/install.sh --dev    the tool and what the tests need (also llama.cpp's RPC server)
#
# Why a script and not a bare `pip install`:
# - llama-cpp-python compiles llama.cpp with -march=native. On x86-64 CPUs that report Intel
#   AMX, the vendored llama.cpp then compiles its AMX tile kernels, which die with "Illegal
#   instruction" on the first batched decode (ggml-org/llama.cpp PR #26954: the tile
#   configuration lives on the stack and is optimised away, and XTILEDATA permission is asked
#   for on the main thread only). We keep every other native instruction set and leave AMX out.
#   EDGESPEC_ALLOW_AMX=1 builds with AMX again, once a fixed llama.cpp is vendored.
# - pip caches a built wheel by its source URL alone, never by the compiler flags, so a wheel
#   built with other flags would be reused silently. We keep llama-cpp-python's wheel in a
#   cache of our own whose key includes the flags.
#
# llama.cpp is built with its RPC backend (-DGGML_RPC=ON), so that `--rpc` can put the target's
# layers on other machines. Extra CMake options (Metal, CUDA) go in CMAKE_ARGS as usual; see
# docs/install.md.
set -eu

cd "$(dirname "$0")/.."
extras=""
case "${1:-}" in
    --dev) extras="[dev]" ;;
    "") ;;
    *) echo "usage: scripts/install.sh [--dev]" >&2; exit 2 ;;
esac

python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=".venv/bin/python -m pip"

version=$(sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$version" ] || { echo "install.sh: no llama-cpp-python==VERSION in pyproject.toml" >&2; exit 1; }

# The user's own flags, for llama.cpp's programs below: build_llama_tools.sh adds what it needs
# itself, and keys its cache by them, so it finds the same build whoever calls it.
user_cmake_args="${CMAKE_ARGS:-}" user_cflags="${CFLAGS:-}" user_cxxflags="${CXXFLAGS:-}"
CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_RPC=ON ${CMAKE_ARGS:-}"
machine=$(uname -m)
case "$machine" in
    x86_64|amd64|AMD64)
        if [ "${EDGESPEC_ALLOW_AMX:-0}" != 1 ]; then
            no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
            CFLAGS="${CFLAGS:-} $no_amx"
            CXXFLAGS="${CXXFLAGS:-} $no_amx"
        fi ;;
esac
export CMAKE_ARGS CFLAGS="${CFLAGS:-}" CXXFLAGS="${CXXFLAGS:-}"

pytag=$(.venv/bin/python -c 'import sys; print(f"{sys.implementation.name}{sys.version_info[0]}{sys.version_info[1]}")')
key=$(printf '%s\n' "$version" "$machine" "$pytag" "$CMAKE_ARGS" "$CFLAGS" "$CXXFLAGS" \
    | .venv/bin/python -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')
wheels="${EDGESPEC_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/wheels}/$key"

if ! ls "$wheels"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    echo "Building llama.cpp (llama-cpp-python $version; several minutes the first time)" >&2
    echo "  CMAKE_ARGS=$CMAKE_ARGS CFLAGS=$CFLAGS CXXFLAGS=$CXXFLAGS" >&2
    mkdir -p "$wheels.part"
    $pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
        -w "$wheels.part" "llama-cpp-python==$version"
    rm -rf "$wheels" && mv "$wheels.part" "$wheels"
fi

$pip install --upgrade --force-reinstall --no-deps "$wheels"/llama_cpp_python-"$version"-*.whl
$pip install -e ".$extras"
# The tests start llama.cpp RPC servers on loopback (`--rpc`), of the same llama.cpp.
if [ -n "$extras" ]; then
    CMAKE_ARGS="$user_cmake_args" CFLAGS="$user_cflags" CXXFLAGS="$user_cxxflags" \
        scripts/build_llama_tools.sh ggml-rpc-server >/dev/null
fi
