#!/usr/bin/env bash
# The whole test suite: unit tests and the SGLang tests on the environment's
# own release (0.5.23), then the same SGLang tests on every release of the CI
# matrix, each from its own .sglang/<release> folder (installed on first use),
# and the generated release tables in docs/reference checked against the probes.
# Every release 0.5.12-0.5.23 instead of the CI matrix:  tests/run.sh --all
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
matrix=${1:---ci}

"$PY" -m pytest -p no:cacheprovider --durations=30  # the slowest: what a `slow` mark would leave out
"$PY" tests/releases.py table --check "$matrix"
"$PY" tests/releases.py test "$matrix" --jobs "${RELEASE_JOBS:-2}" -- -q -p no:cacheprovider
