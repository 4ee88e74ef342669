"""One INFO line per process from the loader, one more where SGLang resolves
its arguments (the widths the start-up check resolved); every detail at
DEBUG. Fresh processes that call SGLang's own ``load_plugins()`` with no
logging configured, as SGLang does, so the loader's own handler prints."""

import os
import re
import subprocess
import sys
from pathlib import Path

from dists import make_dist, simple_plugin
from sglang_spec_plugins.engine.worker_contract import contract
import pytest  # noqa: E402

# slow: the main run (0.5.23) runs it; on the other releases the loader's INFO line (tests/on_sglang/test_loader.py) runs on every release
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
TOML = """
[plugins]
enable = ["prompt_lookup"]
[algorithms.PROMPT_LOOKUP]
max_tokens_per_req = 4
widths_by_batch_size = {1 = 4, 8 = 2}
"""
CHILD = """
import logging, sys
from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading
install_stand_ins()
if sys.argv[1] == "debug":
    logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
run_sglang_plugin_loading()
print("LOADED", file=sys.stderr, flush=True)
from bad_inputs import resolve_server_args
try:
    resolve_server_args(speculative_algorithm="PROMPT_LOOKUP", speculative_num_draft_tokens=4, disable_overlap_schedule=True,
                        attention_backend="flashinfer",  # a CPU resolves torch_native, which widths by batch size refuse
                        log_level="debug" if sys.argv[1] == "debug" else None)  # SGLang configures logging here
except Exception as exc:
    print("REFUSED", type(exc).__name__, file=sys.stderr, flush=True)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
algo = SpeculativeAlgorithm.from_string("PROMPT_LOOKUP")
print("WIDTHS", [algo.get_num_tokens_per_req_for_target_verify(4, draft) for draft in (False, True)], file=sys.stderr, flush=True)
"""


def run(tmp_path, mode):
    (tmp_path / "plugins.toml").write_text(TOML)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k != "SGLANG_PLUGINS"}
    env.update(SGLANG_SPEC_PLUGINS_CONFIG=str(tmp_path / "plugins.toml"),
               PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent)] + sys.path))
    out = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stderr


def ours(stderr, upto=None):
    """The lines our loader's handler printed (``[time] sglang-spec-plugins...``), before ``upto``."""
    text = stderr.split(upto)[0] if upto else stderr
    return [line for line in text.splitlines() if re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] sglang-spec-plugins", line)]


def test_one_info_line_from_the_loader_and_one_from_the_check(tmp_path):
    stderr = run(tmp_path, "default")
    (loaded,) = ours(stderr, upto="LOADED")
    release = contract().release
    assert re.search(r"sglang-spec-plugins \S+: plugins prompt_lookup \(sglang-spec-example-prompt-lookup==[\d.]+\); "
                     rf"registered PROMPT_LOOKUP with SGLang {re.escape(release)}; patches \d+ applied, \d+ not needed, 0 refused; "
                     r"fingerprint [0-9a-f]{16} \(each detail at DEBUG", loaded), loaded
    lines = ours(stderr)
    assert "WIDTHS [4, 4]" in stderr  # the widths SGLang's runners ask for: no line of their own
    if contract().non_overlap_schema != "v2-sync":  # PROMPT_LOOKUP's own validator refuses 0.5.12-0.5.13
        assert "REFUSED PluginError" in stderr and lines == [loaded]
        return
    assert lines == [loaded, lines[1]], lines
    assert lines[1].endswith("sglang-spec-plugins: start-up check passed for PROMPT_LOOKUP (plugin prompt_lookup) at "
                             "--speculative-num-draft-tokens 4: the target worker verifies widths by batch size "
                             "{1 = 4, 8 = 2}; the draft worker does not verify"), lines[1]


def test_the_details_are_at_debug(tmp_path):
    stderr = run(tmp_path, "debug")
    debug = [line for line in stderr.splitlines() if line.startswith("sglang_spec_plugins DEBUG ")]
    # resolving the arguments, SGLang configures logging its own way (no level on the line): the INFO lines
    # there are the first test's
    info = [line for line in stderr.splitlines() if line.startswith("sglang_spec_plugins INFO ")]
    assert len(info) == 1, info
    assert any("loaded plugin prompt_lookup" in line for line in debug)
    assert any(re.search(r"patch \S+ on SGLang \S+: (apply|not needed) \(", line) for line in debug)
    assert any("registered algorithm PROMPT_LOOKUP" in line for line in debug)
    assert any(re.search(r"agreement \S+: fingerprint [0-9a-f]{16} recorded", line) for line in debug)
    assert "widths by batch size at num_draft_tokens=4" in stderr.split("LOADED")[1]  # resolved with the arguments


def test_a_plugins_toml_note_is_counted_on_the_line(tmp_path):
    site = make_dist(tmp_path / "site", "other-drafter", {"other": "other_mod"}, {"other_mod": simple_plugin("OTHER")})
    (tmp_path / "plugins.toml").write_text(TOML + "[algorithms.OTHER]\nplugin = \"other\"\n")  # installed, not enabled
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k != "SGLANG_PLUGINS"}
    env.update(SGLANG_SPEC_PLUGINS_CONFIG=str(tmp_path / "plugins.toml"), PYTHONPATH=os.pathsep.join([str(site)] + sys.path))
    script = ("from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading\n"
              "install_stand_ins(); run_sglang_plugin_loading()\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (line,) = ours(out.stderr)
    assert "; 1 plugins.toml note(s) at DEBUG; fingerprint " in line, line
