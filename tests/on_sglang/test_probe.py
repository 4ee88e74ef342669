"""The probe reads the installed release correctly (checked against the live objects)."""

import inspect
import textwrap

from sglang_spec_plugins.engine.probe import (
    DUMMY_RUN_LOCATIONS,
    GRAPH_RUNNER_LOCATIONS,
    WIDTH_HOOK_NAMES,
    method_source,
    probe,
    resolve_method,
)


def test_runner_sources_read_without_import_equal_the_live_functions():
    found = probe()
    for location, where in ((found.graph_runner, GRAPH_RUNNER_LOCATIONS), (found.dummy_run, DUMMY_RUN_LOCATIONS)):
        assert location is not None
        module, qualname = location.split(":")
        assert (module, qualname) in where
        _, _, func = resolve_method(module, qualname)
        assert method_source(module, qualname) == textwrap.dedent(inspect.getsource(func))


def test_width_hooks_and_enum_methods_match_the_live_classes():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    found = probe()
    assert found.width_hooks == tuple(n for n in WIDTH_HOOK_NAMES if hasattr(SpeculativeAlgorithm.EAGLE, n))
    for name in found.enum_only_methods:
        assert hasattr(SpeculativeAlgorithm.EAGLE, name) and not hasattr(CustomSpecAlgo, name)
    assert found.draft_check == hasattr(SpeculativeAlgorithm.EAGLE, "supports_target_verify_for_draft")
    assert found.problems() == ()


def test_absent_methods_are_absent():
    assert method_source("sglang.srt.model_executor.no_such_module", "Runner.__init__") is None
    assert method_source("sglang.srt.model_executor.model_runner", "ModelRunner.no_such_method") is None
    assert method_source("sglang.srt.model_executor.model_runner", "NoSuchClass.__init__") is None


def test_the_runner_locations_are_kept_between_processes(monkeypatch, tmp_path):
    """A later probe takes the graph runner's and dummy run's locations an earlier one read (the same);
    a kept entry of another shape is read again."""
    from sglang_spec_plugins.engine import probe as probe_module
    from sglang_spec_plugins.engine.source_cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    read = probe_module._runner_locations()
    assert read == (probe().graph_runner, probe().dummy_run) and None not in read
    real = probe_module.locate
    monkeypatch.setattr(probe_module, "locate", lambda locations: (_ for _ in ()).throw(AssertionError("kept")))
    assert probe_module._runner_locations() == read
    (entry,) = (tmp_path / "cache").glob("runner-locations-*.json")
    entry.write_text(entry.read_text().replace('"value": [', '"value": [null, '))
    monkeypatch.setattr(probe_module, "locate", real)
    assert probe_module._runner_locations() == read
