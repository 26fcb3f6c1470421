#!/bin/sh
# Build llama.cpp's own programs from the llama.cpp source that edgespec's llama-cpp-python
# vendors, so that they run exactly the llama.cpp edgespec runs.
#
#   scripts/build_llama_tools.sh [--version V] [--out DIR] TARGET...
#
# TARGET is a CMake target of llama.cpp: `ggml-rpc-server` (the RPC server, see
# scripts/build_rpc_server.sh), `llama-quantize` (edgespec derives models through the library's
# own `llama_model_quantize`; the tool is for comparing), `llama-speculative-simple` (the comparison,
# scripts/compare_llamacpp.py), `llama-server` (llama.cpp's HTTP server, benchmarks/fim/). The
# version is the one pyproject.toml pins (so the script also runs on a remote machine from a
# clone, with no .venv); where .venv has llama-cpp-python
# installed, the script checks that it is the same. Built programs are kept and reused; the
# script prints the path of each, one a line, in the order asked.
set -eu

cd "$(dirname "$0")/.."
version=""
out=""
targets=""
while [ $# -gt 0 ]; do
    case "$1" in
        --version) version="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -*) echo "usage: scripts/build_llama_tools.sh [--version V] [--out DIR] TARGET..." >&2; exit 2 ;;
        *) targets="$targets $1"; shift ;;
    esac
done
[ -n "$targets" ] || { echo "usage: scripts/build_llama_tools.sh [--version V] [--out DIR] TARGET..." >&2; exit 2; }

pinned=$(sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
version="${version:-$pinned}"
[ -n "$version" ] || { echo "build_llama_tools.sh: no llama-cpp-python==VERSION in pyproject.toml" >&2; exit 1; }
if [ -x .venv/bin/python ]; then
    installed=$(.venv/bin/python -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null || true)
    if [ -n "$installed" ] && [ "$installed" != "$version" ]; then
        echo "build_llama_tools.sh: .venv has llama-cpp-python $installed but these tools would be $version;" \
             "they must be the same llama.cpp (run scripts/install.sh, or pass --version $installed)" >&2
        exit 1
    fi
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
out="${out:-${XDG_CACHE_HOME:-$HOME/.cache}/edgespec/llama-tools/$version-$key}"

missing=""
for t in $targets; do
    [ -x "$out/$t" ] || missing="$missing $t"
done

if [ -n "$missing" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "Building$missing from llama-cpp-python $version's llama.cpp (a few minutes)" >&2
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
    # The server's sources are configured only when it is asked for: they add build time.
    server=OFF
    case " $missing " in *" llama-server "*) server=ON ;; esac
    # shellcheck disable=SC2086 # CMAKE_ARGS is a list of options
    CFLAGS="$cflags" CXXFLAGS="${CXXFLAGS:-} $cflags" cmake -S "$src" -B "$work/build" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=$server -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        ${CMAKE_ARGS:-} >&2
    # As many jobs as the installer found memory for (scripts/install.py sets it), else one a CPU.
    # shellcheck disable=SC2086 # one target per word
    cmake --build "$work/build" -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || sysctl -n hw.ncpu)}" \
        --target $missing >&2
    mkdir -p "$out"
    for t in $missing; do
        cp "$work/build/bin/$t" "$out/$t.part" && mv "$out/$t.part" "$out/$t"
    done
fi
for t in $targets; do
    echo "$out/$t"
done
