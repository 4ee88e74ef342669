"""Running the real SGLang source on a CPU-only machine, for the project's
tests and the conformance kit.

SGLang is imported from whatever release is first on sys.path (the test
environment's, or a ``--target`` folder on PYTHONPATH). The only stand-ins
are names SGLang leaves unbound without CUDA (see shared/cpu-harness.md).
"""

from __future__ import annotations

import importlib
import sys
import types

from ..engine.cpu_harness import install_stand_ins  # noqa: F401  (re-exported for the tests and the demo)


def absent_kernel_package(monkeypatch, name: str, *submodules: str) -> None:
    """For one test, a stand-in for a CUDA-only kernel package that is not
    installed on a CPU machine (``sgl_kernel``), for SGLang modules that import
    from it unguarded at their top: every name imported from it, or from its
    ``submodules``, is a function that fails when called, since the tests must
    never reach a CUDA kernel."""

    def stand_in(module_name):
        module = types.ModuleType(module_name)

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)

            def unreachable(*args, **kwargs):
                raise AssertionError(f"the CUDA kernel {module_name}.{attr} was called on a CPU")

            return unreachable

        module.__getattr__ = __getattr__
        return module

    monkeypatch.setitem(sys.modules, name, stand_in(name))
    for sub in submodules:
        monkeypatch.setitem(sys.modules, f"{name}.{sub}", stand_in(f"{name}.{sub}"))


def reset_plugin_state() -> None:
    """Undo what SGLang's load_plugins() and our loader did in this process:
    SGLang's once-per-process guard, our loader's report, and every algorithm
    our loader registered."""
    plugins = importlib.import_module("sglang.srt.plugins")
    plugins._plugins_loaded = False
    from sglang_spec_plugins import loader
    from sglang_spec_plugins.engine.algorithm import _PolicyMethods
    from sglang_spec_plugins.serving.registration import unregister

    registry = importlib.import_module("sglang.srt.speculative.spec_registry")
    unregister([n for n, algo in registry._REGISTRY.items() if isinstance(algo, _PolicyMethods)])
    loader._reset_for_tests()


def run_sglang_plugin_loading() -> None:
    """Start plugins exactly as SGLang does in each of its processes."""
    importlib.import_module("sglang.srt.plugins").load_plugins()


def resolve_speculative(server_args):
    """``server_args`` (SGLang's own ``ServerArgs``) passed through the release's
    own speculative-argument handling, where SGLang calls the algorithm's
    ``validate_server_args`` (the loader's start-up check):
    ``arg_groups/speculative_hook.handle_speculative_decoding`` on 0.5.13+,
    ``ServerArgs._handle_speculative_decoding`` on 0.5.12.x (whose
    ``__post_init__`` has run it already). What a server does with its flags
    before anything a CPU cannot do (the model's config, the devices)."""
    try:
        handler = importlib.import_module("sglang.srt.arg_groups.speculative_hook").handle_speculative_decoding
    except ModuleNotFoundError:
        handler = type(server_args)._handle_speculative_decoding
    handler(server_args)
    return server_args


def server_args_from_command(argv):
    """The ``ServerArgs`` SGLang's own ``prepare_server_args`` makes of a
    ``launch_server`` command line (``argv`` without the program), through
    :func:`resolve_speculative`."""
    return resolve_speculative(importlib.import_module("sglang.srt.server_args").prepare_server_args(list(argv)))
