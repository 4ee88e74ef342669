#!/usr/bin/env bash
# Set up a fresh machine and run the loader against real SGLang (CPU harness)
# with the bundled plugins.toml: PROMPT_LOOKUP (examples/prompt_lookup_drafter),
# a drafter that drafts, with widths by batch size; then serve three requests
# with it through SGLang's real scheduler on this CPU (examples/serve_demo.py;
# --no-serve skips that part, ~30-60 s).
#   .venv/            the environment (torch CPU, SGLang installed --no-deps,
#                     this package and the example drafters the tests use)
# Re-running reuses .venv; delete it for a clean start.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r tests/requirements-sglang-cpu.txt
.venv/bin/python -m pip install -q --no-deps -r tests/requirements-sglang-nodeps.txt
.venv/bin/python -m pip install -q -e '.[test]' ./examples/prompt_lookup_drafter ./examples/sbd_drafter ./examples/dflash_block_drafter \
  ./examples/controlled_acceptance_drafter

.venv/bin/sglang-spec-plugins check plugins.toml -n 4 --attention-backend flashinfer
.venv/bin/python examples/serve_demo.py "$@"
