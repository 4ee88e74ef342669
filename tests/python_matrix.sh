#!/usr/bin/env bash
# The SGLang-free tests (docs/explanation/testing.md) on Python 3.10, 3.11, 3.12 and 3.13, each in a fresh venv under
# .matrix/<version> with only this package and its test extra (pytest, hypothesis, setuptools) from PyPI.
# Interpreter per version, first found: python3.X on PATH, pyenv's ($PYENV_ROOT or ~/.pyenv), uv's
# (`uv python install`; it downloads from GitHub, which some machines cannot reach). A version not
# found fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=${*:-3.10 3.11 3.12 3.13}

works() {  # $1 runs and is Python $2 (a pyenv shim on PATH may exist without that version)
    "$1" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$2'.split('.'))))" >/dev/null 2>&1
}

find_python() {
    local v=$1 found
    for found in "$(command -v "python$v" 2>/dev/null)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python; do
        [ -n "$found" ] && works "$found" "$v" && { echo "$found"; return; }
    done
    if command -v uv >/dev/null 2>&1 && uv python install "$v" >&2 && found=$(uv python find "$v") && works "$found" "$v"; then
        echo "$found"; return
    fi
    echo "tests/python_matrix.sh: no Python $v found (PATH, pyenv, uv)" >&2
    return 1
}

for v in $versions; do
    py=$(find_python "$v")
    venv=.matrix/$v
    started=$SECONDS
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
    echo "== Python $v ($("$venv/bin/python" -V 2>&1), $py)"
    env -u PYTHONPATH "$venv/bin/python" -m pytest -p no:cacheprovider -q -m "not sglang" tests --ignore=tests/on_sglang
    echo "== Python $v: $((SECONDS - started)) s"
done
