#!/bin/sh
# Set up edgespec in a virtual environment at .venv (the repository root), building llama.cpp
# so that it cannot crash on the machine it was built on.
#
#   scripts/install.sh          the tool
#   scripts/install.sh --dev    the tool and what the tests need (also llama.cpp's RPC server)
#
# The installer is scripts/install.py (Windows runs it directly: py -3 scripts\install.py), which
# checks the Python, the machine and the compiler before it builds, and says why it builds as it
# does. This finds a Python to run it with: $PYTHON, else python3, else the newest python3.N that
# is 3.10 or newer, so that a Mac whose python3 is the system's 3.9 uses Homebrew's python3.12.
set -eu

cd "$(dirname "$0")/.."
python="${PYTHON:-}"
if [ -z "$python" ]; then
    for candidate in python3 python3.14 python3.13 python3.12 python3.11 python3.10; do
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            python="$candidate"
            break
        fi
    done
fi
# None new enough: python3 itself, whose version check names the fix.
python="${python:-python3}"
command -v "$python" >/dev/null 2>&1 || {
    echo "install: no $python here: install Python 3.10 or newer and run: PYTHON=python3.12 scripts/install.sh" >&2
    exit 1
}
exec "$python" scripts/install.py "$@"
