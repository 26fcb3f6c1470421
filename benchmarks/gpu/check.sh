#!/bin/bash
# The GPU check (benchmarks/gpu/README.md): on a lent device machine, build llama.cpp (through
# llama-cpp-python's own CMake project) with CUDA for the GPU there, make random-weight models
# of the default pair's shapes, and report doctor, the plan, greedy losslessness and the time
# per round outside llama.cpp. Without a GPU (a dry run), the same checks on small models with
# the llama.cpp already installed in .venv.
#
#   benchmarks/gpu/check.sh                  sizes from the machine: gpu with nvidia-smi, else small
#   benchmarks/gpu/check.sh --sizes small    the dry run's sizes anywhere
#   benchmarks/gpu/check.sh --configure-only configure the CUDA build and stop (checks the carried
#                                            source, the toolkit and cuBLAS without compiling)
#
# Needs .gpucheck/ at the repository root, made by benchmarks/gpu/prepare.sh (the trimmed
# llama-cpp-python source, the wheels the device lacks, the default pair's tokenizer).
# Results go to $OUT (the device tool's folder) or .gpucheck/out: summary.txt, results.json and
# logs.tar.gz. Environment: GPUCHECK_CUDA_ARCH (default: nvidia-smi's compute capability),
# GPUCHECK_CUBLAS (a folder with lib/libcublas.so.* and include/cublas_v2.h, when the CUDA
# toolkit has none), GPUCHECK_WORK (scratch, default /tmp/gpucheck), GPUCHECK_BUDGET (seconds the
# whole check may take, default 560), PYTHON (the dry run's interpreter, default .venv/bin/python).
set -u
start=$(date +%s)
root=$(cd "$(dirname "$0")/../.." && pwd)
carried="$root/.gpucheck"
out="${OUT:-$carried/out}"
work="${GPUCHECK_WORK:-/tmp/gpucheck}"
budget="${GPUCHECK_BUDGET:-560}"
mkdir -p "$out" "$work/logs"

sizes="" configure_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes="$2"; shift 2 ;;
        --configure-only) configure_only=1; shift ;;
        *) echo "usage: check.sh [--sizes gpu|small] [--configure-only]" >&2; exit 2 ;;
    esac
done
have_gpu=0
nvidia-smi >/dev/null 2>&1 && have_gpu=1
[ -n "$sizes" ] || { [ "$have_gpu" = 1 ] && sizes=gpu || sizes=small; }
say() { echo "[check $(( $(date +%s) - start ))s] $*" >&2; }
fail() {
    # fail MESSAGE [LOG]: the log's end goes to stderr too (the device tool's reply shows the
    # output's tail), and every log comes back in logs.tar.gz.
    [ -n "${2:-}" ] && tail -n 40 "$work/logs/$2" >&2
    say "FAILED: $1${2:+ (logs/$2)}"
    tar czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
    exit 1
}
[ -f "$carried/tokenizer.json.gz" ] || fail "no $carried/tokenizer.json.gz: run benchmarks/gpu/prepare.sh"

cuda_root() {
    # The toolkit nvcc belongs to (nvcc may be a wrapper script in another folder).
    local d
    for d in "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda \
        /usr/local/cuda-*; do
        [ -x "$d/bin/nvcc" ] && [ -d "$d/lib64" ] && { echo "$d"; return; }
    done
}

find_cublas() {
    # cuBLAS: the toolkit's own (CMake finds it), else GPUCHECK_CUBLAS, else the pip wheel that
    # PyTorch brought (nvidia/cu13 or nvidia/cublas in python3's site-packages).
    local cuda
    cuda=$(cuda_root)
    if [ -n "$cuda" ] && ls "$cuda"/lib64/libcublas.so* "$cuda"/targets/*/lib/libcublas.so* \
        >/dev/null 2>&1; then
        say "cuBLAS from the CUDA toolkit in $cuda"
        return
    fi
    if [ -z "${GPUCHECK_CUBLAS:-}" ]; then
        local lib
        lib=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null \
            | while read -r d; do find "$d/nvidia" -name 'libcublas.so.*' 2>/dev/null; done \
            | head -1)
        [ -n "$lib" ] && GPUCHECK_CUBLAS=$(dirname "$(dirname "$lib")")
    fi
    [ -n "${GPUCHECK_CUBLAS:-}" ] || fail "no cuBLAS in the CUDA toolkit nor in python3's packages"
    local c="$GPUCHECK_CUBLAS"
    cublas_args=(
        "-DCUDA_cublas_LIBRARY=$(ls "$c"/lib/libcublas.so* | head -1)"
        "-DCUDA_cublasLt_LIBRARY=$(ls "$c"/lib/libcublasLt.so* | head -1)"
        "-DCMAKE_CUDA_FLAGS=-I$c/include"
    )
    cublas_include="-I$c/include"
    export LD_LIBRARY_PATH="$c/lib:${LD_LIBRARY_PATH:-}"
    say "cuBLAS from $c"
}

find_driver() {
    # libcuda (the driver's): linked for llama.cpp's virtual-memory pool; without it, the build
    # goes without that pool (GGML_CUDA_NO_VMM), and says so.
    local lib
    lib=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so(\.1)? / {print $NF; exit}')
    if [ -z "$lib" ]; then
        local d
        for d in ${LD_LIBRARY_PATH//:/ } /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
            lib=$(ls "$d"/libcuda.so* 2>/dev/null | head -1)
            [ -n "$lib" ] && break
        done
    fi
    if [ -n "$lib" ]; then
        driver_args=("-DCUDA_cuda_driver_LIBRARY=$lib")
    else
        driver_args=("-DGGML_CUDA_NO_VMM=ON")
        say "no libcuda found: building with GGML_CUDA_NO_VMM=ON"
    fi
}

unpack() {
    # Python's tarfile reads xz itself (the image may have no xz program for tar).
    rm -rf "$work/src" "$work"/llama_cpp_python-*
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
        "$carried"/llama-cpp-python-*.tar.xz "$work" && mv "$work"/llama_cpp_python-* "$work/src" \
        || fail "cannot unpack the carried llama-cpp-python source"
}

build_llama() {
    # llama-cpp-python's CMake project, as `pip install` drives it, with install.sh's flags
    # (-DLLAVA_BUILD=OFF -DGGML_RPC=ON, AMX left out) and CUDA for this GPU only. Only the
    # libraries the Python package loads are built (not llama.cpp's `common`).
    local src="$work/src" arch="${GPUCHECK_CUDA_ARCH:-}"
    [ -n "$arch" ] || arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null \
        | head -1 | tr -d ' .')
    [ -n "$arch" ] || fail "no compute capability (set GPUCHECK_CUDA_ARCH, e.g. 90)"
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "no nvcc"
    command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
    export LD_LIBRARY_PATH="$(cuda_root)/lib64:${LD_LIBRARY_PATH:-}"
    cublas_args=() driver_args=() cublas_include=""
    find_cublas
    find_driver
    local no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    # Each CUDA compile job through a launcher that logs its peak memory (nvcc's children
    # included), for the installer's memory a CUDA job takes (check.py sums it up).
    cat >"$work/peak" <<'PEAK'
#!/bin/sh
exec python3 -c 'import resource, subprocess, sys
done = subprocess.run(sys.argv[2:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
source = next((a for a in sys.argv[2:] if a.endswith(".cu")), "?")
open(sys.argv[1], "a").write(f"{peak} {source}\n")
sys.exit(done.returncode)' "$GPUCHECK_PEAKS" "$@"
PEAK
    chmod +x "$work/peak"
    export GPUCHECK_PEAKS="$work/logs/compile-peaks.txt"
    rm -f "$GPUCHECK_PEAKS"
    say "configuring llama.cpp for CUDA architecture $arch ($(nvcc --version | tail -1))"
    cmake -S "$src" -B "$work/build" -G Ninja "-DCMAKE_C_FLAGS=$no_amx" \
        "-DCMAKE_CXX_FLAGS=$no_amx $cublas_include" \
        -DCMAKE_BUILD_TYPE=Release -DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_CUDA=ON \
        -DCMAKE_CUDA_COMPILER_LAUNCHER="$work/peak" \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" "${cublas_args[@]}" "${driver_args[@]}" \
        >"$work/logs/configure.log" 2>&1 || fail "configure" configure.log
    [ "$configure_only" = 1 ] && { say "configured: $work/build"; exit 0; }
    say "building on $(nproc) cores"
    # What is left but 150 s: the checks themselves take a minute or two on a GPU.
    local limit=$(( budget - 150 - ($(date +%s) - start) ))
    timeout "$limit" cmake --build "$work/build" --target llama >"$work/logs/build.log" 2>&1 \
        || fail "build (limit ${limit}s)" build.log
    mkdir -p "$src/llama_cpp/lib"
    find "$work/build" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$src/llama_cpp/lib/" \;
    # The version that doctor reports, as pip would have recorded it.
    local version
    version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$src/llama_cpp/__init__.py")
    mkdir -p "$work/site/llama_cpp_python-$version.dist-info"
    printf 'Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: %s\n' "$version" \
        >"$work/site/llama_cpp_python-$version.dist-info/METADATA"
    say "built llama.cpp: $(ls "$src/llama_cpp/lib" | tr '\n' ' ')"
}

check() { "$python" "$root/benchmarks/gpu/check.py" "$@" --sizes "$sizes" --work "$work"; }
if [ "$have_gpu" = 1 ] || [ "$configure_only" = 1 ]; then
    python=python3
    unpack
    if [ "$configure_only" = 0 ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$work/site" "$carried"/wheels/*.whl >"$work/logs/pip.log" 2>&1 \
            || fail "installing the carried wheels" pip.log
        # The models need numpy and llama.cpp's gguf-py only: written while llama.cpp builds.
        PYTHONPATH="$work/src/vendor/llama.cpp/gguf-py" check models \
            --tokenizer "$carried/tokenizer.json.gz" >"$work/logs/models.log" 2>&1 &
        models_pid=$!
    fi
    build_llama
    wait "$models_pid" || fail "writing the models" models.log
    export PYTHONPATH="$root:$work/src:$work/site:$work/src/vendor/llama.cpp/gguf-py"
else
    python="${PYTHON:-$root/.venv/bin/python}"
    export PYTHONPATH="$root"
    check models --tokenizer "$carried/tokenizer.json.gz" 2>"$work/logs/models.log" \
        || fail "writing the models" models.log
fi
export PYTHONUNBUFFERED=1 EDGESPEC_HOME="$work/home"
rm -rf "$EDGESPEC_HOME"
say "checking with $($python --version 2>&1) (sizes: $sizes)"
check run --out "$out" --budget $(( budget - ($(date +%s) - start) ))
rc=$?
tar czf "$out/logs.tar.gz" -C "$work" logs
say "done (rc=$rc); results in $out"
exit $rc
