#!/bin/sh
# Build llama.cpp's RPC server (`ggml-rpc-server`) from the llama.cpp source that edgespec's
# llama-cpp-python vendors, for the machines that compute the target's layers (`--rpc`).
#
#   scripts/build_rpc_server.sh [--version V] [--out DIR]
#
# Both ends must run the same llama.cpp: the RPC protocol changes between versions, and a
# server of another version refuses the client at the handshake. The version is the one
# pyproject.toml pins (so the script also runs on a remote machine from a clone, with no
# .venv); where .venv has llama-cpp-python installed, the script checks that it is the same.
# It prints the path of the server binary on its last line; a built server is kept and reused.
set -eu

cd "$(dirname "$0")/.."
version=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --version) version="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: scripts/build_rpc_server.sh [--version V] [--out DIR]" >&2; exit 2 ;;
    esac
done

pinned=$(sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
version="${version:-$pinned}"
[ -n "$version" ] || { echo "build_rpc_server.sh: no llama-cpp-python==VERSION in pyproject.toml" >&2; exit 1; }
if [ -x .venv/bin/python ]; then
    installed=$(.venv/bin/python -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null || true)
    if [ -n "$installed" ] && [ "$installed" != "$version" ]; then
        echo "build_rpc_server.sh: .venv has llama-cpp-python $installed but this server would be $version;" \
             "client and servers must be the same version (run scripts/install.sh, or pass --version $installed)" >&2
        exit 1
    fi
    [ -n "$installed" ] && echo "llama-cpp-python $installed in .venv: building the server from the same llama.cpp" >&2
fi

python="${PYTHON:-python3}"
[ -x .venv/bin/python ] && python=.venv/bin/python

# The same native flags as scripts/install.sh, AMX left out for the same reason (docs/install.md).
cflags="${CFLAGS:-}"
case "$(uname -m)" in
    x86_64|amd64|AMD64)
        [ "${EDGESPEC_ALLOW_AMX:-0}" = 1 ] || cflags="$cflags -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
esac
key=$(printf '%s\n' "$version" "$(uname -m)" "$cflags" "${CMAKE_ARGS:-}" \
    | "$python" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')
out="${out:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/rpc-server/$version-$key}"

if [ ! -x "$out/ggml-rpc-server" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "Building ggml-rpc-server from llama-cpp-python $version's llama.cpp (a few minutes)" >&2
    "$python" -m pip download --quiet --no-binary :all: --no-deps -d "$work" "llama-cpp-python==$version"
    tar xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
    src="$work/llama_cpp_python-$version/vendor/llama.cpp"
    # Like llama-cpp-python's own build: CMake and Ninja from the package index when the
    # machine has no CMake or no build tool.
    if ! command -v cmake >/dev/null || ! { command -v make >/dev/null || command -v ninja >/dev/null; }; then
        "$python" -m pip install --quiet --target "$work/tools" cmake ninja
        PATH="$work/tools/bin:$PATH"
        export PYTHONPATH="$work/tools${PYTHONPATH:+:$PYTHONPATH}"
        CMAKE_ARGS="-G Ninja ${CMAKE_ARGS:-}"
    fi
    # shellcheck disable=SC2086 # CMAKE_ARGS is a list of options
    CFLAGS="$cflags" CXXFLAGS="${CXXFLAGS:-} $cflags" cmake -S "$src" -B "$work/build" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF ${CMAKE_ARGS:-} >&2
    cmake --build "$work/build" --target ggml-rpc-server -j "$(nproc 2>/dev/null || sysctl -n hw.ncpu)" >&2
    mkdir -p "$out.part"
    cp "$work/build/bin/ggml-rpc-server" "$out.part/"
    rm -rf "$out" && mv "$out.part" "$out"
fi
echo "$out/ggml-rpc-server"
