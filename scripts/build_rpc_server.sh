#!/bin/sh
# Build llama.cpp's RPC server (`ggml-rpc-server`) from the llama.cpp source that edgespec's
# llama-cpp-python vendors, for the machines that compute the target's layers (`--rpc`).
#
#   scripts/build_rpc_server.sh [--version V] [--out DIR]
#
# Both ends must run the same llama.cpp: the RPC protocol changes between versions, and a
# server of another version refuses the client at the handshake (scripts/build_llama_tools.sh
# checks the version against .venv's). It prints the path of the server binary on its last
# line; a built server is kept and reused.
set -eu
exec sh "$(dirname "$0")/build_llama_tools.sh" "$@" ggml-rpc-server
