"""Declared capabilities reach SGLang's algorithm object on the releases that
ask them; elsewhere the loader says they have no effect; the rest keep
SGLang's default."""

import logging
import textwrap

import pytest

from dists import PLUGIN_HEADER
from sglang_spec_plugins.capabilities import CAPABILITIES

DECLARED = {name: not capability.default for name, capability in CAPABILITIES.items()}

DRAFTER = PLUGIN_HEADER + textwrap.dedent(f"""
    class Worker:
        pass

    @hookimpl
    def sgl_spec_algorithms():
        return [AlgorithmSpec(name="CAPS", worker_factory=lambda server_args: Worker, supports_overlap=True,
                              capabilities={DECLARED!r}),
                AlgorithmSpec(name="PLAIN", worker_factory=lambda server_args: Worker, supports_overlap=True)]
    """)


def asked(name):
    """Whether the installed SGLang asks algorithms ``name`` (its stock class or its enum has it)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    return hasattr(CustomSpecAlgo, name) or name in vars(SpeculativeAlgorithm)


@pytest.fixture
def algorithms(sglang_loaded, site, caplog):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    caplog.set_level(logging.DEBUG, logger="sglang_spec_plugins")  # the note is a detail: DEBUG

    site.add("caps-drafter", {"caps": "caps_mod"}, {"caps_mod": DRAFTER})
    sglang_loaded('[plugins]\nenable = ["caps"]\n')
    return SpeculativeAlgorithm.from_string("CAPS"), SpeculativeAlgorithm.from_string("PLAIN"), caplog.text


@pytest.mark.parametrize("name", list(CAPABILITIES))
def test_a_declared_capability_is_sglangs_answer_where_it_asks(algorithms, name):
    caps, plain, log = algorithms
    if asked(name):
        assert getattr(caps, name)() is DECLARED[name]
        assert getattr(plain, name)() is CAPABILITIES[name].default  # undeclared: SGLang's default
        assert f"declares {name}" not in log
    else:
        assert not hasattr(caps, name)
        assert (f"algorithm CAPS (plugin caps) declares {name}, which SGLang "
                f"{__import__('sglang').__version__} does not ask (SGLang {CAPABILITIES[name].since}+): it has no effect") in log


def test_the_releases_named_are_the_first_that_ask():
    from packaging.version import Version

    from sglang_spec_plugins.engine.probe import installed_version

    release = Version(installed_version())
    for name, capability in CAPABILITIES.items():
        assert asked(name) == (release >= Version(capability.since)), name
