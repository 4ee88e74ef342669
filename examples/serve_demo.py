"""Start plugins the way SGLang does, then show what SGLang now serves.

Runs SGLang's own ``load_plugins()`` (which starts our loader through the
``sglang.srt.plugins`` entry point) with ./plugins.toml, asks SGLang's own
width code what each registered plugin algorithm verifies, and prints
``sglang-spec-plugins list``.
"""

import logging
import os
import sys
from pathlib import Path

from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading

ROOT = Path(__file__).resolve().parent.parent

NUM_DRAFT_TOKENS = 16


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("sglang.srt.plugins",):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("SGLANG_SPEC_PLUGINS_CONFIG", str(ROOT / "plugins.toml"))
    install_stand_ins()
    run_sglang_plugin_loading()

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_spec_plugins import cli, loader

    report = loader.load()
    print(f"\nSGLang {report.sglang_version}: plugin algorithms at speculative_num_draft_tokens={NUM_DRAFT_TOKENS}")
    for name in report.registered:
        algo = SpeculativeAlgorithm.from_string(name)
        draft = algo.supports_target_verify_for_draft()
        target_width = algo.get_num_tokens_per_req_for_target_verify(NUM_DRAFT_TOKENS, False)
        draft_width = algo.get_num_tokens_per_req_for_target_verify(NUM_DRAFT_TOKENS, True) if draft else "-"
        print(f"  {name:<14} {type(algo).__name__}: target verify width {target_width}, "
              f"draft worker may verify: {draft} (width {draft_width})")
    print()
    return cli.main(["list"])


if __name__ == "__main__":
    sys.exit(main())
