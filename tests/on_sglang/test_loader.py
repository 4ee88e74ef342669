"""The loader on real SGLang: started by SGLang's own load_plugins(), its
answers reach SGLang's own width and draft-verify code."""

import inspect
import os
import re
import subprocess
import sys
import multiprocessing
import types

import pytest

from sglang_spec_plugins.engine.worker_contract import contract

from sglang_spec_plugins import config
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.errors import PluginError, StartupRefused

EXAMPLES = """
[plugins]
enable = ["sbd", "dflash_block"]
[algorithms.SBD]
max_tokens_per_req = 16
verify_width = 8
[algorithms.DFLASH_BLOCK]
block_size = 16
"""


def spec_algorithm():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return SpeculativeAlgorithm


def test_load_plugins_registers_plugin_algorithms(sglang_loaded):
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    sglang_loaded(EXAMPLES)
    sbd = spec_algorithm().from_string("sbd")
    assert isinstance(sbd, CustomSpecAlgo)
    assert sbd.name == "SBD" and type(sbd).policy.plugin == "sbd"
    assert sbd.supports_overlap is True
    assert spec_algorithm().from_string("DFLASH_BLOCK").supports_overlap is True


def test_sglang_does_not_know_the_algorithm_without_the_loader(sglang_loaded):
    with pytest.raises(ValueError, match="Unknown speculative algorithm name: SBD"):
        spec_algorithm().from_string("SBD")


def test_builtin_algorithms_are_unchanged(sglang_loaded):
    SA = spec_algorithm()
    names = [a.name for a in SA] + ["NEXTN"]

    def answer(name):
        try:
            algo = SA.from_string(name)
        except ValueError as exc:  # NEXTN before 0.5.20
            return str(exc)
        draft = getattr(algo, "supports_target_verify_for_draft", algo.is_dflash)()  # 0.5.12: no such method
        return algo, draft

    before = {name: answer(name) for name in names}
    sglang_loaded(EXAMPLES)
    assert {name: answer(name) for name in names} == before


def test_every_method_sglang_calls_on_an_algorithm_is_there(sglang_loaded):
    """Each public method of the built-in enum runs on a plugin algorithm."""
    import torch

    sglang_loaded(EXAMPLES)
    SA = spec_algorithm()
    sbd = SA.from_string("SBD")
    names = [n for n, v in vars(SA).items() if not n.startswith("_") and inspect.isfunction(v)]
    assert names, "no methods found on SpeculativeAlgorithm"
    for name in names:
        method = getattr(sbd, name)  # AttributeError here is the bug this test guards
        params = [p for p in inspect.signature(method).parameters.values() if p.default is p.empty]
        if not params:
            assert method() is not NotImplemented
    if "create_future_map" in names:
        pool = types.SimpleNamespace(size=4, req_to_token=torch.zeros(4, 8, dtype=torch.int32), device="cpu")
        assert type(sbd.create_future_map(torch.device("cpu"), pool)).__name__ == "FutureMap"
    for predicate in ("need_topk", "carries_draft_hidden_states", "is_eagle", "is_dflash"):
        if predicate in names:
            assert getattr(sbd, predicate)() is False
    assert sbd.is_speculative() is True


def test_reserved_names_of_the_installed_release_are_known():
    assert probe().reserved_names <= config.RESERVED_ALGORITHM_NAMES
    assert "EAGLE" in probe().reserved_names


def test_on_error_fail_stops_sglang_and_names_the_plugin(sglang_loaded, site):
    site.add("bad-drafter", {"bad": "bad_mod"}, {"bad_mod": "raise ImportError('needs flash_attn')\n"})
    with pytest.raises(StartupRefused, match=r"plugin 'bad' \(bad-drafter==1.0\): cannot import bad_mod: ImportError: needs flash_attn") as info:
        sglang_loaded('[plugins]\nenable = ["sbd", "bad"]\n')
    assert isinstance(info.value, SystemExit)
    with pytest.raises(ValueError):
        spec_algorithm().from_string("SBD")  # nothing half-applied


def test_on_error_skip_serves_the_rest(sglang_loaded, site, caplog):
    site.add("bad-drafter", {"bad": "bad_mod"}, {"bad_mod": "raise ImportError('needs flash_attn')\n"})
    sglang_loaded('[plugins]\nenable = ["sbd", "bad"]\non_error = "skip"\n')
    assert spec_algorithm().from_string("SBD").name == "SBD"
    assert "skipped plugin bad" in caplog.text


def test_registration_is_all_or_nothing(sglang_loaded):
    from sglang.srt.speculative import spec_registry

    spec_registry.register_algorithm("SBD")(lambda server_args: object)
    try:
        with pytest.raises(StartupRefused, match=r"algorithm SBD \(plugin 'sbd'\) is already registered in SGLang .* by someone else"):
            sglang_loaded(EXAMPLES)
        assert spec_registry.get_spec("DFLASH_BLOCK") is None
    finally:
        spec_registry._REGISTRY.pop("SBD", None)


def test_loading_twice_is_a_no_op(sglang_loaded):
    import sglang.srt.plugins as plugins

    sglang_loaded(EXAMPLES)
    first = spec_algorithm().from_string("SBD")
    plugins._plugins_loaded = False
    plugins.load_plugins()
    assert spec_algorithm().from_string("SBD") is first


def test_bad_width_is_refused_when_sglang_hands_over_server_args(sglang_loaded, site):
    """SGLang's speculative arg hook calls handle_server_args / validate_server_args
    on a plugin algorithm while it resolves its arguments, before any model loads."""
    from dists import simple_plugin

    site.add("wide-drafter", {"wide": "wide_mod"}, {"wide_mod": simple_plugin("WIDE", width="num_draft_tokens * 2")})
    sglang_loaded('[plugins]\nenable = ["wide", "dflash_block"]\n')
    wide = spec_algorithm().from_string("WIDE")
    with pytest.raises(PluginError, match=r"plugin 'wide' \(wide-drafter==1.0\): algorithm WIDE: sgl_spec_verify_width\(num_draft_tokens=4, is_draft_worker=False\) returned 8; it must be an int from 1 to the maximum width 4"):
        wide.handle_server_args(types.SimpleNamespace(speculative_num_draft_tokens=4))
    block = spec_algorithm().from_string("DFLASH_BLOCK")
    why = (r"--speculative-draft-model-path is not set; the worker loads its draft model from it"
           if contract().non_overlap_schema == "v2-sync" else r"a worker with its own draft model needs SGLang 0\.5\.14\+")
    with pytest.raises(PluginError, match=r"plugin 'dflash_block' \(sglang-spec-example-dflash-block==0.1.0\): algorithm "
                       r"DFLASH_BLOCK: .*" + why):
        block.validate_server_args(types.SimpleNamespace(speculative_algorithm="DFLASH_BLOCK", speculative_num_draft_tokens=8,
                                                         disable_overlap_schedule=True))
    block.handle_server_args(types.SimpleNamespace(speculative_num_draft_tokens=16))


def _child(queue, toml_path):
    import os

    os.environ["SGLANG_SPEC_PLUGINS_CONFIG"] = toml_path
    from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading

    install_stand_ins()
    run_sglang_plugin_loading()
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string("DFLASH_BLOCK")
    queue.put((type(algo).__name__, algo.get_num_tokens_per_req_for_target_verify(16, True), algo.supports_target_verify_for_draft()))


def test_a_spawned_process_sees_the_same_registration(sglang_loaded):
    path = sglang_loaded(EXAMPLES)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, str(path)))
    proc.start()
    try:
        got = queue.get(timeout=240)
    finally:
        proc.join(timeout=60)
    assert got == ("PluginSpecAlgo_DFLASH_BLOCK", 16, True)
    assert proc.exitcode == 0


def test_the_start_up_summary_reaches_a_process_that_configured_no_logging(sglang_loaded, tmp_path):
    """SGLang runs load_plugins() before it configures logging; Python would drop
    the loader's INFO lines there. A fresh process calling SGLang's own
    load_plugins() with nothing configured prints the summary on stderr."""
    path = sglang_loaded(EXAMPLES)
    script = ("from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading\n"
              "install_stand_ins(); run_sglang_plugin_loading()\n")
    env = dict(os.environ, SGLANG_SPEC_PLUGINS_CONFIG=str(path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"sglang-spec-plugins \S+: plugins .*; registered [A-Z_, ]*DFLASH_BLOCK[A-Z_, ]* with SGLang .*; fingerprint [0-9a-f]{16}",
                     out.stderr), out.stderr[-2000:]
