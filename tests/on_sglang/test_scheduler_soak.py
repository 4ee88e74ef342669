"""The soak's logic on a CPU: mixed requests through SGLang's real scheduler
with PROMPT_LOOKUP, some sampled or asking for logprobs, some aborted mid-stream with
SGLang's own AbortReq, a KV pool so small that SGLang retracts requests;
every greedy request (logprob ones included) finishes token-identical to plain decoding of the same
request, every sampled one with all its tokens, none refused, and at the end every KV
slot and request slot is free, with SGLang's own pool checks strict (``testing/scheduler_soak.py``, which
``tools/gpu/soak.py`` mirrors on a GPU through ``sglang.Engine`` and the HTTP server).

Each run is one process: the PROMPT_LOOKUP run with 96 KV slots for 8
requests of up to 88 tokens each, then plain decoding of every greedy request
SGLang retracted, of the first two others and of the first logprob request (plain decoding under the
triton interpreter costs ~0.4 s a token: the whole set would take minutes;
test_scheduler_serve.py compares every token of its requests), with a pool
large enough for all of them at once (greedy outputs do not depend on it).
"""

import json
import os
import subprocess
import sys

import pytest

from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.scheduler_soak import CPU_SET
from sglang_spec_plugins.testing.soak import ABORT, BEYOND_GREEDY, LOGPROB, SAMPLED, STRICT_POOL_CHECKS, mixed_requests, verdict

REQUESTS, SEED = 32, 0

# slow: the main run (0.5.23) runs it; on the other releases the soak's request set and verdict (tests/test_soak.py) and the real Scheduler's start (test_scheduler_start) run on every release
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    contract().non_overlap_schema != "v2-sync",
    reason=f"PROMPT_LOOKUP refuses SGLang {contract().release} by design (it drives the V2 schema, 0.5.14+)")]


def _soak(tmp_path, algorithm, *options):
    config = tmp_path / "plugins.toml"
    config.write_text('[plugins]\nenable = ["prompt_lookup"]\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 4\n')
    env = dict(os.environ, SGLANG_SPEC_PLUGINS_CONFIG=str(config), PYTHONPATH=os.pathsep.join(sys.path), **STRICT_POOL_CHECKS)
    env.pop("SGLANG_SPEC_PLUGINS", None)
    command = [sys.executable, "-m", "sglang_spec_plugins.testing.scheduler_soak", *([algorithm] if algorithm else []),
               "--requests", str(REQUESTS), "--seed", str(SEED), *options]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert result["served"], result.get("error") or result
    return result, run.stderr


def test_a_small_soak_frees_every_slot_and_matches_plain_decoding(tmp_path):
    requests = mixed_requests(REQUESTS, SEED, **CPU_SET)
    assert {r.kind for r in requests} >= {ABORT, SAMPLED, LOGPROB}  # no JSON: this scheduler loads no tokenizer
    soaked, log = _soak(tmp_path, "PROMPT_LOOKUP", "--ndt", "4", "--concurrency", "8", "--max-total-tokens", "96")
    greedy = [r for r in requests if r.kind == "greedy"]
    retracted = [r.rid for r in greedy if soaked["outcomes"][r.rid]["retractions"]]
    others = [r.rid for r in greedy if r.rid not in retracted][:2] + [r.rid for r in requests if r.kind == LOGPROB][:1]
    plain, _ = _soak(tmp_path, None, "--concurrency", "32", "--max-total-tokens", "2048", "--only", ",".join(retracted + others))

    found = verdict(requests, soaked["outcomes"], {rid: o["output_ids"] for rid, o in plain["outcomes"].items()})
    assert found["problems"] == [], found["problems"]
    assert found["finished"] == found["greedy"] == len(greedy)
    assert found["identical"] == found["compared"] == len(retracted) + len(others), found["divergent"]
    assert found["refused"] == 0 and found["served_beyond_greedy"] == sum(r.kind in BEYOND_GREEDY for r in requests)
    assert found["aborted"] + found["finished_before_abort"] == sum(r.kind == ABORT for r in requests)
    assert found["aborted"] >= 1
    assert "KV cache pool is full. Retract requests." in log and found["retractions"] >= 1, found
    assert max(o["verify_steps"] for o in soaked["outcomes"].values()) >= 1  # it drafted and verified

    pools = soaked["pools"]
    assert pools == {"kv_free": 96, "kv_total": 96, "req_slots_free": pools["req_slots_total"],
                     "req_slots_total": pools["req_slots_total"], "waiting": 0, "running": 0}, pools
