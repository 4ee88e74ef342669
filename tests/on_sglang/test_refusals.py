"""A release shape the loader does not know: plugin algorithms are not served
(nothing patched, nothing registered, the reason logged as an error), and
SGLang starts as it would without this package."""

import re

import pytest

from sglang_spec_plugins import patches
from sglang_spec_plugins.engine.source_cache import CACHE_ENV
from sglang_spec_plugins.engine.probe import GRAPH_RUNNER_LOCATIONS, DUMMY_RUN_LOCATIONS, probe, resolve_method
from sglang_spec_plugins.patches import catalogue
from sglang_spec_plugins.patches.source_edit import Edit
from sglang_spec_plugins.patches.unit import FunctionPatch, Target
from test_loader import EXAMPLES, spec_algorithm


def current_functions():
    return [resolve_method(*where)[2] for where in GRAPH_RUNNER_LOCATIONS + DUMMY_RUN_LOCATIONS if resolve_method(*where)]


def test_unknown_runner_shape_refuses_and_patches_nothing(sglang_loaded, monkeypatch, caplog):
    future = FunctionPatch(
        name="runners.future",
        summary="a shape no release has",
        alternatives=tuple(Target(*where) for where in GRAPH_RUNNER_LOCATIONS),
        edits=(Edit(old="self.width = compute_width_somehow()", new="pass", fixed_markers=("never_there(",), why="-"),),
    )
    monkeypatch.setenv(CACHE_ENV, "off")  # the kept plans follow this package's files, not a list changed here
    monkeypatch.setattr(catalogue, "PATCHES", catalogue.PATCHES + (future,))
    before = current_functions()
    sglang_loaded(EXAMPLES)
    assert re.search(rf"not serving DFLASH_BLOCK, SBD: patch runners.future: SGLang {probe().version}: .*__init__ has an unknown shape"
                     r".*; nothing registered or patched, built-in algorithms unchanged", caplog.text)
    assert current_functions() == before
    assert not any(p.applied for p in patches.PATCHES)
    with pytest.raises(ValueError, match="Unknown speculative algorithm name"):
        spec_algorithm().from_string("SBD")


def test_missing_runner_refuses(sglang_loaded, monkeypatch, caplog):
    gone = FunctionPatch(
        name="runners.gone",
        summary="a runner that moved",
        alternatives=(Target("sglang.srt.model_executor.no_such_module", "Runner.__init__"),),
        edits=(),
    )
    monkeypatch.setenv(CACHE_ENV, "off")
    monkeypatch.setattr(catalogue, "PATCHES", (gone,) + catalogue.PATCHES)
    sglang_loaded(EXAMPLES)
    assert re.search(r"not serving DFLASH_BLOCK, SBD: patch runners.gone: SGLang .*: sglang.srt.model_executor.no_such_module:Runner.__init__ not found", caplog.text)
    assert not any(p.applied for p in patches.PATCHES)
    assert spec_algorithm().from_string("EAGLE").is_eagle()  # built-in algorithms served as ever
