"""Fixtures for tests on the real SGLang source (any supported release)."""

import os

# SGLang's Triton kernels run on a CPU only interpreted, and triton decides per
# kernel when it is decorated: set before any test module imports SGLang.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from sglang_spec_plugins.testing.cpu import install_stand_ins, reset_plugin_state, run_sglang_plugin_loading

install_stand_ins()


@pytest.fixture
def sglang_loaded(monkeypatch, tmp_path):
    """Return ``load(toml_text)``: write plugins.toml, point the loader at it
    and run SGLang's own plugin loading; state is reset after the test."""
    monkeypatch.delenv("SGLANG_SPEC_PLUGINS", raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)

    def load(toml_text: str):
        path = tmp_path / "plugins.toml"
        path.write_text(toml_text)
        monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(path))
        run_sglang_plugin_loading()
        return path

    reset_plugin_state()
    yield load
    reset_plugin_state()


SBD_TOML = """
[plugins]
enable = ["sbd"]
[algorithms.SBD]
max_tokens_per_req = 8
verify_width = {width}
"""


@pytest.fixture
def sbd(sglang_loaded):
    """``sbd(width)`` -> the example SBD plugin algorithm, loaded through
    SGLang's plugin loading, verifying ``width`` tokens; maximum width 8."""

    def load(width: int):
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        sglang_loaded(SBD_TOML.format(width=width))
        return SpeculativeAlgorithm.from_string("SBD")

    return load

