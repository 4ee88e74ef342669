"""The runner patches (patches.runners) on the installed release: needed
where the loader applies them, reverted exactly, neutral for built-in
algorithms, idempotent."""

import pytest

import runner_drive
from runner_drive import dummy_run_width, graph_runner_width, target_verify
from sglang_spec_plugins import loader
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.patches import PATCHES, apply_all, plan_all, revert_all
from sglang_spec_plugins.patches.runners import DUMMY_INPUT_EDITS, DUMMY_RUN, GRAPH_RUNNER
from test_loader import EXAMPLES, spec_algorithm

RUNNER_PATCHES = ((GRAPH_RUNNER, graph_runner_width), (DUMMY_RUN, dummy_run_width))
"""Each runner patch with the driver that runs the function it edits."""


def current(patch):
    """The function SGLang's class holds now for ``patch``'s target."""
    return next(found for target in patch.alternatives for found in [target.resolve()] if found)[2]


@pytest.mark.parametrize("patch, drive", RUNNER_PATCHES, ids=[patch.name for patch, _ in RUNNER_PATCHES])
def test_a_patch_is_applied_only_where_the_release_needs_it(sglang_loaded, patch, drive):
    plan = plan_all([patch], probe().version)[patch.name]
    sglang_loaded(EXAMPLES)
    assert loader.load().patches[patch.name] == plan
    if plan.verdict == "not needed":
        assert not patch.applied
        return
    assert plan.verdict == "apply" and patch.applied
    # 0.5.19+ check the algorithm name when the config is published: publish after loading.
    with runner_drive.published(speculative_algorithm="SBD", speculative_num_draft_tokens=16) as server_args:
        SA = spec_algorithm()
        sbd, block = SA.from_string("SBD"), SA.from_string("DFLASH_BLOCK")
        assert drive(sbd, False, server_args) == (8, target_verify())
        assert drive(block, True, server_args) == (16, target_verify())
        revert_all([patch])
        ((_, edits),) = plan.steps
        for edit in edits:
            if edit in DUMMY_INPUT_EDITS:
                continue  # the verify input, not the width: test_dummy_input.py
            if "is_dflash()" in edit.old:  # the release's draft-worker gate refuses a plugin's draft worker
                with pytest.raises(RuntimeError, match="This should not happen"):
                    drive(block, True, server_args)
            else:  # the release's hard-coded width: ndt instead of the plugin's 8
                assert drive(sbd, False, server_args) == (16, target_verify())


def test_revert_restores_the_original_functions(sglang_loaded):
    originals = {patch.name: current(patch) for patch, _ in RUNNER_PATCHES}
    sglang_loaded(EXAMPLES)
    for patch, _ in RUNNER_PATCHES:
        assert (current(patch) is not originals[patch.name]) == patch.applied
    revert_all(PATCHES)
    for patch, _ in RUNNER_PATCHES:
        func = current(patch)
        assert func is originals[patch.name] and not patch.applied
        assert not set(patch.injected) & set(func.__globals__)


@pytest.mark.parametrize("name, is_draft_worker", [("EAGLE", False), ("DFLASH", False), ("DFLASH", True)])
def test_builtin_algorithms_are_unchanged(sglang_loaded, name, is_draft_worker):
    algo = spec_algorithm().from_string(name)
    with runner_drive.published(speculative_algorithm=name, speculative_num_draft_tokens=16) as server_args:

        def outcomes():
            return tuple(drive(algo, is_draft_worker, server_args) for _, drive in RUNNER_PATCHES)

        before = outcomes()
        assert before[0][1] == before[1][1] == target_verify()
        sglang_loaded(EXAMPLES)
        assert outcomes() == before


def test_applying_twice_is_a_no_op(sglang_loaded):
    sglang_loaded(EXAMPLES)
    first = {patch.name: current(patch) for patch, _ in RUNNER_PATCHES}
    plans = loader.load().patches
    assert apply_all(PATCHES, probe().version) == plans
    for patch, _ in RUNNER_PATCHES:
        assert current(patch) is first[patch.name]
