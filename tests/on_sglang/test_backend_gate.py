"""The start-up gate (``backends.gate``) on real SGLang: the release's own
function that builds an attention backend from ``ATTENTION_BACKENDS`` refuses
a plugin algorithm the classification (``attention_support``) does not serve,
before the registered factory runs, and passes everything else through.

Each case calls that function (as the module or class holds it now) on a
model-runner stand-in (``runner_drive.model_runner``) for a backend name whose
registry entry is replaced, for the test, by a factory that stops the build
as soon as it is called: the cases need no backend to be buildable on a CPU,
and a name no release registers (``future_attn``) stands for a backend the
project has not examined.
"""

import re

import pytest

import runner_drive
from sglang_spec_plugins.engine.probe import installed_version
from sglang_spec_plugins.errors import EngineError
from sglang_spec_plugins.patches.backend_gate import GATE, classified_name
from sglang_spec_plugins.patches.attention_support import attention_support
from sglang_spec_plugins.patches.support import Serving
from sglang_spec_plugins.patches.unit import revert_all
from test_capture_input import plugin  # noqa: F401  (the fixture)

NDT = 4  # as test_capture_input's plugin is loaded
RELEASE = installed_version()
FUTURE = "future_attn"

class _Built(BaseException):
    """Raised by the stand-in factory: the build reached the registry (a BaseException, past SGLang's handlers)."""


@pytest.fixture
def load(plugin):
    """``load(width, draft=False)``: the CAP_CHAIN and CAP_TREE plugin algorithms at that width."""
    return lambda width, draft=False: plugin("chain", width, draft)


@pytest.fixture
def builds(monkeypatch):
    """``builds(name, algorithm, is_draft_worker=False, mla=False)``: whether
    the release's backend-building function reaches the registered factory of
    ``name`` (True), or refuses first (raises)."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    target = next(t for t in GATE.alternatives if t.source() is not None)

    def factory(runner):
        raise _Built

    def builds(name, algorithm, is_draft_worker=False, mla=False, **server):
        monkeypatch.setitem(ATTENTION_BACKENDS, name, factory)
        algo = SpeculativeAlgorithm.from_string(algorithm)
        fields = dict(speculative_algorithm=algorithm, speculative_num_draft_tokens=NDT, speculative_num_steps=NDT - 1,
                      speculative_eagle_topk=1, attention_backend=name, **server)
        with runner_drive.published(**fields) as server_args:
            runner_drive.as_raw_input(server_args, server)  # the operator's names, as the gate reads them
            runner = runner_drive.model_runner(algo, is_draft_worker, server_args)
            runner.use_mla_backend = mla
            owner, attr, _ = target.resolve()
            build = getattr(owner, attr)
            try:
                if isinstance(owner, type):  # ModelRunner._get_attention_backend_from_str (up to 0.5.15)
                    build(runner, name)
                else:  # attention_backend_setup._build_full_attention_backend_from_str (0.5.16+)
                    build(model_runner=runner, backend_str=name, init_new_workspace=False)
            except _Built:
                return True
        raise AssertionError(f"{target} returned without calling the registered factory")

    return builds


def registry_names():
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    return sorted(ATTENTION_BACKENDS) + [FUTURE]


def refusal_pattern(algorithm, width, worker, backend, shape, why=".+"):
    return (rf"algorithm {algorithm} \(plugin 'cap'\) verifies {width} tokens per request shaped as a {shape} on the "
            rf"{worker} worker at speculative_num_draft_tokens={NDT}, but SGLang {re.escape(RELEASE)}'s "
            rf"{re.escape(backend)} attention backend {why}; choose another --attention-backend")


@pytest.mark.parametrize("width", [2, NDT, 6])
def test_the_gate_enforces_the_classification_on_every_registered_backend(load, builds, width):
    """Every backend the release registers, and one it does not know: a plugin
    algorithm is built exactly where the classification does not refuse it,
    and refused (algorithm, plugin, width, shape, worker, backend, release)
    before the factory runs where it does."""
    load(width)
    refused = set()
    for name in registry_names():
        for shape in ("chain", "tree"):
            algorithm = f"CAP_{shape.upper()}"
            if attention_support(name, width, NDT, shape).verdict == Serving.REFUSED:
                with pytest.raises(EngineError, match=refusal_pattern(algorithm, width, "target", name, shape)):
                    builds(name, algorithm)
                refused.add((name, shape))
            else:
                assert builds(name, algorithm)
    # never trusted: a tree on a backend nobody examined, a tree on trtllm_mha (causal only)
    assert {(FUTURE, "tree"), ("trtllm_mha", "tree"), ("torch_native", "tree")} <= refused
    assert ("flashinfer", "chain") not in refused and ("flashinfer", "tree") not in refused
    assert ((FUTURE, "chain") in refused) == (width != NDT)


def test_without_the_gate_the_refused_backends_are_built(load, builds):
    """The patch test: with ``backends.gate`` reverted, what it refuses is built."""
    load(6)
    assert attention_support(FUTURE, 6, NDT, "chain").verdict == Serving.REFUSED
    revert_all([GATE])
    assert builds(FUTURE, "CAP_CHAIN") and builds("trtllm_mha", "CAP_TREE")


@pytest.mark.parametrize("algorithm", ["EAGLE", "DFLASH"])
def test_built_in_algorithms_build_every_backend_as_before(load, builds, algorithm):
    load(6)
    assert all(builds(name, algorithm) for name in registry_names())
    assert all(builds(name, algorithm, is_draft_worker=True) for name in registry_names())


def test_a_draft_worker_that_does_not_verify_is_not_gated(load, builds):
    load(6, draft=False)
    assert builds(FUTURE, "CAP_TREE", is_draft_worker=True)


def test_a_draft_worker_that_verifies_is_gated(load, builds):
    """CAP_CHAIN's draft worker verifies (a tree whose draft worker verifies is refused earlier, at load)."""
    load(6, draft=True)
    assert builds("flashinfer", "CAP_CHAIN", is_draft_worker=True)
    with pytest.raises(EngineError, match=refusal_pattern("CAP_CHAIN", 6, "draft", FUTURE, "chain")):
        builds(FUTURE, "CAP_CHAIN", is_draft_worker=True)


def test_an_mla_model_is_classified_as_the_mla_backend_its_factory_builds(load, builds):
    load(6)
    assert classified_name("flashinfer", type("R", (), {"use_mla_backend": True})) == "flashinfer_mla"
    assert builds("flashinfer", "CAP_CHAIN")
    with pytest.raises(EngineError, match=refusal_pattern("CAP_CHAIN", 6, "target", "flashinfer_mla", "chain")):
        builds("flashinfer", "CAP_CHAIN", mla=True)
    with pytest.raises(EngineError, match=refusal_pattern("CAP_CHAIN", 6, "target", "aiter_mla", "chain",
                                                          "the AITER MLA kernels take a fixed draft length.*")):
        builds("aiter", "CAP_CHAIN", mla=True)


@pytest.mark.parametrize("mode, judged", [("prefill", False), ("decode", True)])
def test_only_the_half_of_a_pair_that_verifies_is_judged(load, builds, mode, judged):
    """``--prefill-attention-backend flashinfer --decode-attention-backend X``: SGLang's hybrid backend
    sends TARGET_VERIFY to the prefill half unless ``--speculative-attention-mode decode``; the decode half
    is built, unjudged, where it only decodes (before: refused after the weights had loaded)."""
    load(6)
    assert attention_support(FUTURE, 6, NDT, "chain").verdict == Serving.REFUSED
    pair = dict(prefill_attention_backend="flashinfer", decode_attention_backend=FUTURE, speculative_attention_mode=mode)
    if judged:
        with pytest.raises(EngineError, match=refusal_pattern("CAP_CHAIN", 6, "target", FUTURE, "chain")):
            builds(FUTURE, "CAP_CHAIN", **pair)
    else:
        assert builds(FUTURE, "CAP_CHAIN", **pair)
    assert builds("flashinfer", "CAP_CHAIN", **pair)


def test_unknown_shape_is_refused():
    assert GATE.condition("def build(model_runner, backend_str):\n    return make(backend_str)\n")[0] == "refused"
    renamed = "def build(*, runner, name):\n    return ATTENTION_BACKENDS[backend_str](runner)\n"
    assert GATE.condition(renamed) == ("refused", "unknown shape: the function does not take (model_runner or self, "
                                                  "backend_str, ...) first")
