#!/usr/bin/env bash
# The whole test suite: unit tests and the SGLang tests on the environment's
# own release (0.5.23), the generated release tables in docs/reference checked
# against the probes, and the same SGLang tests on every other release of the CI
# matrix, each from its own .sglang/<release> folder (installed on first use).
# The main run and the matrix run side by side, the matrix two releases at a time
# (RELEASE_JOBS); the main run's output is printed when it ends.
# Every release 0.5.12-0.5.23 instead of the CI matrix:  tests/run.sh --all
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
matrix=${1:---ci}

"$PY" tools/releases.py table --check "$matrix"
main_log=$(mktemp)
# torch on one thread, as each release's run (tools/releases.py): the runs share the cores
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$PY" -m pytest -p no:cacheprovider --durations=30 > "$main_log" 2>&1 &   # --durations: what a `slow` mark would leave out
main=$!
status=0
"$PY" tools/releases.py test "$matrix" --skip-own --jobs "${RELEASE_JOBS:-2}" -- -q -p no:cacheprovider || status=$?
wait $main || status=$?
echo; echo "===== main run (SGLang $("$PY" -c 'from importlib.metadata import version; print(version("sglang"))')) ====="
cat "$main_log"; rm -f "$main_log"
exit $status
