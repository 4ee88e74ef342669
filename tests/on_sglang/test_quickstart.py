"""The operator quick start's commands, run as written on the CPU harness, as
far as a CPU goes: ``check`` with the flags shown, in the repository root
(the bundled plugins.toml), and the ``launch_server`` command's flags through
SGLang's own ``prepare_server_args`` and speculative-argument handling, where
the loader's start-up check runs (after SGLang's own ``load_plugins()``, as
``launch_server`` does). Nothing is typed in here: the commands are read out
of the README's section."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from sglang_spec_plugins.engine.worker_contract import contract

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("sglang-spec-plugins")
SECTION = "Quick start: operators"


def quick_start_commands():
    """The shell commands of the first ``bash`` block under the section's heading,
    continuation lines joined (README.md, or a page under docs/ once the README
    is split)."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        heading = re.search(rf"^#+ {re.escape(SECTION)}\s*$", text, re.M)
        if heading:
            block = re.search(r"```bash\n(.*?)```", text[heading.end():], re.S).group(1)
            joined = block.replace("\\\n", " ")
            return [shlex.split(line.split("#")[0]) for line in joined.splitlines() if line.split("#")[0].strip()]
    raise AssertionError(f"no '{SECTION}' section found")


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k != "SGLANG_PLUGINS"}


def test_the_quick_start_installs_what_the_repository_has():
    (install,) = [c for c in quick_start_commands() if c[:2] == ["pip", "install"]]
    assert [arg for arg in install[2:] if arg.startswith("./")] == ["./examples/prompt_lookup_drafter"]
    assert (ROOT / "examples" / "prompt_lookup_drafter" / "pyproject.toml").is_file()


def test_check_as_written_passes_on_the_bundled_plugins_toml():
    (check,) = [c for c in quick_start_commands() if c[0] == "sglang-spec-plugins"]
    out = subprocess.run([str(EXE), *check[1:]], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=600)
    if contract().non_overlap_schema != "v2-sync":
        # PROMPT_LOOKUP runs on 0.5.14+; on 0.5.12-0.5.13 its own validator refuses, as the quick start says
        assert out.returncode == 1 and "PROMPT_LOOKUP drives SGLang's V2 speculative schema (SGLang 0.5.14+)" in out.stderr
        return
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.rstrip().endswith("ok")
    assert "PROMPT_LOOKUP at ndt=4, target worker, flashinfer: patched: at widths 2, 4" in out.stdout


CHILD = """
import sys
from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading, server_args_from_command
install_stand_ins()
run_sglang_plugin_loading()  # launch_server loads plugins before it prepares its arguments
args = server_args_from_command(sys.argv[1:])
print("RESOLVED", args.speculative_algorithm, args.speculative_num_draft_tokens, args.attention_backend, flush=True)
"""


def test_the_server_command_passes_sglangs_own_argument_handling():
    (launch,) = [c for c in quick_start_commands() if c[:3] == ["python", "-m", "sglang.launch_server"]]
    argv = launch[3:]
    argv[argv.index("--model-path") + 1] = "dummy"  # the model is the operator's; nothing here reads it
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], cwd=ROOT, env=clean_env(), capture_output=True,
                         text=True, timeout=600)
    if contract().non_overlap_schema != "v2-sync":
        assert out.returncode == 1 and "PROMPT_LOOKUP drives SGLang's V2 speculative schema (SGLang 0.5.14+)" in out.stderr
        return
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESOLVED PROMPT_LOOKUP 4 flashinfer" in out.stdout
    assert ("start-up check passed for PROMPT_LOOKUP (plugin prompt_lookup) at --speculative-num-draft-tokens 4: "
            "the target worker verifies widths by batch size {1 = 4, 8 = 2}") in out.stderr
