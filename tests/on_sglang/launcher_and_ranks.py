"""A launcher and its scheduler ranks, as SGLang starts them, on the CPU.

``python launcher_and_ranks.py RANKS_JSON``: this process runs SGLang's own
``load_plugins()`` and resolves the widths (``handle_server_args``, as
SGLang's launcher does while it resolves its arguments), then spawns one
process per rank with ``multiprocessing``'s spawn context (as SGLang spawns
``run_scheduler_process``), each with the launcher's environment plus the
rank's ``env`` (and, with ``site``, another plugin directory in place of the
launcher's, i.e. another installed plugin version). Each rank runs
``load_plugins()`` and resolves the widths again. One JSON line per process
on stdout: ``{"rank", "pid", "outcome": "ok" | "refused", "message", "agreement"}``
(``message``: the fingerprint, or the refusal; ``agreement``: the directory).
"""

import json
import multiprocessing
import os
import sys
import types

ALGORITHM, NDT = "SKEW", 8


def start(rank):
    from sglang_spec_plugins.testing.cpu import install_stand_ins

    install_stand_ins()
    import sglang.srt.plugins as plugins

    try:
        plugins.load_plugins()
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        SpeculativeAlgorithm.from_string(ALGORITHM).handle_server_args(types.SimpleNamespace(speculative_num_draft_tokens=NDT))
        from sglang_spec_plugins import loader

        outcome, message = "ok", loader.load().fingerprint
    except BaseException as exc:  # StartupRefused (a SystemExit) or the width refusal
        outcome, message = "refused", str(getattr(exc, "cause", exc))
    print(json.dumps({"rank": rank, "pid": os.getpid(), "outcome": outcome, "message": message,
                      "agreement": os.environ.get("SGLANG_SPEC_PLUGINS_AGREEMENT")}), flush=True)


def rank_main(rank, env, site, launcher_site):
    os.environ.update(env)
    if site:
        sys.path[:] = [site if p == launcher_site else p for p in sys.path]
    start(rank)


if __name__ == "__main__":
    ranks = json.loads(sys.argv[1])
    start("launcher")
    context = multiprocessing.get_context("spawn")
    for rank, spec in enumerate(ranks, 1):
        process = context.Process(target=rank_main, args=(rank, spec.get("env", {}), spec.get("site"), os.environ.get("LAUNCHER_SITE")))
        process.start()
        process.join()
