#!/usr/bin/env bash
# Set up a fresh machine and run the loader against real SGLang (CPU harness)
# with the bundled plugins.toml and the two example drafter plugins.
#   .venv/            the environment (torch CPU, SGLang installed --no-deps)
# Re-running reuses .venv; delete it for a clean start.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r tests/requirements-sglang-cpu.txt
.venv/bin/python -m pip install -q --no-deps -r tests/requirements-sglang-nodeps.txt
.venv/bin/python -m pip install -q -e '.[test]' ./examples/sbd_drafter ./examples/dflash_block_drafter ./examples/prompt_lookup_drafter \
  ./examples/controlled_acceptance_drafter

.venv/bin/python examples/serve_demo.py
