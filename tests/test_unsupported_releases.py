"""Releases before 0.5.12 cannot serve plugin algorithms: the loader says so,
naming the release and what is missing, registers and patches nothing, and
lets SGLang start with its built-in algorithms."""

import subprocess
import sys
from pathlib import Path

import pytest

import releases

pytestmark = [pytest.mark.sglang, pytest.mark.own_releases]  # runs SGLang 0.5.10.post1 and 0.5.11 from .sglang/ with torch

ROOT = Path(__file__).resolve().parent.parent
PRELUDE = "from sglang_spec_plugins.testing.cpu import install_stand_ins; install_stand_ins()\n"


def run_on(release, code):
    env = releases.environ_for(release)
    env["SGLANG_SPEC_PLUGINS_CONFIG"] = str(ROOT / "tests" / "examples.toml")
    env.pop("SGLANG_SPEC_PLUGINS", None)
    return subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_0_5_11_sglang_starts_without_plugin_algorithms():
    """0.5.11 has SGLang's plugin framework, so SGLang runs the loader; it has no algorithm registry."""
    code = (
        "from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner\n"
        "before = CudaGraphRunner.__init__\n"
        "import sglang.srt.plugins as p\n"
        "try:\n"
        "    p.load_plugins()\n"
        "finally:\n"
        "    print('UNTOUCHED', CudaGraphRunner.__init__ is before)\n"
    )
    out = run_on("0.5.11", code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("not serving DFLASH_BLOCK, SBD: SGLang 0.5.11 (older than 0.5.12) lacks the algorithm registry "
            "sglang.srt.speculative.spec_registry (SGLang 0.5.12+); nothing registered or patched") in out.stderr
    assert "UNTOUCHED True" in out.stdout


def test_check_on_0_5_11_says_it_cannot_serve():
    out = run_on("0.5.11", "from sglang_spec_plugins.cli import main\nraise SystemExit(main(['check', '--single-process']))\n")
    assert out.returncode == 1
    assert ("error: SGLang 0.5.11 cannot serve DFLASH_BLOCK, SBD: SGLang 0.5.11 (older than 0.5.12) lacks the algorithm "
            "registry sglang.srt.speculative.spec_registry (SGLang 0.5.12+); the loader will register nothing") in out.stderr


@pytest.mark.parametrize("how", ["entry point", "doctor"])
def test_0_5_10_post1_is_refused(how):
    """0.5.10.post1 has no plugin framework: SGLang never starts the loader; called directly it serves nothing."""
    code = {
        "entry point": "from sglang_spec_plugins.loader import sglang_entry_point\nsglang_entry_point()\n",
        "doctor": "from sglang_spec_plugins.cli import main\nraise SystemExit(main(['doctor']))\n",
    }[how]
    out = run_on("0.5.10.post1", code)
    assert out.returncode == (0 if how == "entry point" else 1)
    message = ("SGLang 0.5.10.post1 (older than 0.5.12) lacks the general-plugin framework sglang.srt.plugins "
               "(SGLang 0.5.11+) and the algorithm registry sglang.srt.speculative.spec_registry (SGLang 0.5.12+)")
    assert message in out.stdout + out.stderr
