"""Start plugins the way SGLang does, resolve the quick start's server flags,
then serve a few requests with PROMPT_LOOKUP through SGLang's real scheduler.

1. SGLang's own ``load_plugins()`` (which starts our loader through the
   ``sglang.srt.plugins`` entry point) with ./plugins.toml: PROMPT_LOOKUP,
   widths by batch size ``{1 = 4, 8 = 2}``; the loader logs its one line.
2. The operator quick start's flags (:data:`FLAGS`) through SGLang's own
   ``prepare_server_args`` and speculative-argument handling, where the
   loader's start-up check runs and logs the widths it resolved; then what
   SGLang's width code answers, and each batch size's width.
3. ``sglang-spec-plugins list``.
4. Unless ``--no-serve``: three greedy requests and a sampled one through the
   release's real ``Scheduler`` on this CPU, with SGLang's overlap scheduler on
   (its default) (``sglang_spec_plugins.testing.scheduler_serve``: a tiny
   random Llama, triton attention interpreted, about 30-60 s), and how many
   tokens each verify step committed.
"""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading, server_args_from_command

ROOT = Path(__file__).resolve().parent.parent
ALGORITHM, NUM_DRAFT_TOKENS = "PROMPT_LOOKUP", 4
FLAGS = ["--speculative-algorithm", ALGORITHM, "--speculative-num-draft-tokens", str(NUM_DRAFT_TOKENS),
         "--attention-backend", "flashinfer"]
"""The flags of the operator quick start's ``launch_server`` command (README)."""


def main(serve: bool) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sglang.srt.plugins").setLevel(logging.WARNING)
    os.environ.setdefault("SGLANG_SPEC_PLUGINS_CONFIG", str(ROOT / "plugins.toml"))
    install_stand_ins()
    run_sglang_plugin_loading()

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_spec_plugins import cli, loader

    report = loader.load()
    print(f"\nSGLang {report.sglang_version}, resolving: launch_server --model-path MODEL {' '.join(FLAGS)}")
    server_args_from_command(["--model-path", "dummy", *FLAGS])  # SGLang's own argument handling: the start-up check runs
    algo = SpeculativeAlgorithm.from_string(ALGORITHM)
    print(f"  {ALGORITHM}: {type(algo).__name__}; SGLang sizes buffers and graphs for "
          f"{algo.get_num_tokens_per_req_for_target_verify(NUM_DRAFT_TOKENS, False)} tokens per request; "
          f"draft worker may verify: {algo.supports_target_verify_for_draft()}")
    buckets = report.policies[ALGORITHM].widths_by_batch_size(NUM_DRAFT_TOKENS, False)
    for size in (1, 4, 8, 32):
        print(f"  a decode step of {size:>2} requests verifies {buckets.at(size)} tokens per request")
    print()
    code = cli.main(["list"])
    if code or not serve:
        return code
    print(f"\nServing 3 greedy requests and a sampled one with {ALGORITHM} through SGLang's real Scheduler on this "
          "CPU, overlap on ...", flush=True)
    from sglang_spec_plugins.testing.scheduler_serve import greedy_requests, request

    requests = greedy_requests(16) + [request("sampled", [9, 200, 14, 77, 130, 41], 16, temperature=0.8, top_p=0.9)]
    listed = Path(os.environ.get("TMPDIR", "/tmp")) / f"serve-demo-{os.getpid()}.json"
    listed.write_text(json.dumps(requests))
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-m", "sglang_spec_plugins.testing.scheduler_serve", ALGORITHM, "--ndt",
                          str(NUM_DRAFT_TOKENS), "--requests", str(listed), "--overlap"], env=env, capture_output=True,
                         text=True)
    listed.unlink()
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"served": False, "error": out.stderr[-3000:]}
    if not result["served"]:
        print(f"not served: {result['error']}")
        return 1
    for rid, request in result["requests"].items():
        print(f"  {rid:<10} {request['completion_tokens']} tokens in {request['spec_verify_ct']} verify steps "
              f"({(request['completion_tokens'] - 1) / max(request['spec_verify_ct'], 1):.1f} per step after the prefill's first token): {request['output_ids']}")
    print(f"  [batch size, tokens per request] of each TARGET_VERIFY step: {result['verify_steps']}")
    print(f"  (scheduler start {result['init_s']} s, serving {result['serve_s']} s; tests/on_sglang/test_scheduler_serve.py "
          "checks greedy tokens equal plain greedy decoding's, test_request_kinds_serve.py sampled ones' distribution)")
    return 0


if __name__ == "__main__":
    sys.exit(main(serve="--no-serve" not in sys.argv[1:]))
