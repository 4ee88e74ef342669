"""FA3 and triton on real SGLang: a plugin width the backend would ignore is
refused when the backend is built, and the refusal is needed only where
upstream stores ndt instead of the plugin's width (triton 0.5.17-0.5.20 store
ndt too, but lay each verify batch out at its verify input's width).

Each test starts the release's own backend ``__init__`` (as the class holds it
now: wrapped when the patches are applied) on a ``SimpleNamespace`` model
runner, and stops it right after the statements that store the TARGET_VERIFY
width (``speculative_num_draft_tokens`` / ``num_draft_tokens`` /
``target_verify_num_tokens_per_req``), then reads what SGLang stored.
"""

import ast
import contextlib
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from packaging.version import Version

from sglang_spec_plugins.testing.cpu import absent_kernel_package
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.errors import EngineError
from sglang_spec_plugins.patches.attention_support import report
from sglang_spec_plugins.patches.fa3 import FA3
from sglang_spec_plugins.patches.triton import TRITON
from sglang_spec_plugins.patches.unit import apply_all, revert_all
from test_loader import EXAMPLES

MODULES = {"FA3": FA3.alternatives[0].module, "triton": TRITON.alternatives[0].module}
PATCHES = (FA3, TRITON)
CLASSES = {"FA3": "FlashAttentionBackend", "triton": "TritonAttnBackend"}
LABELS = {"FA3": r"FA3/FA4 \(FlashAttentionBackend\)", "triton": r"triton \(TritonAttnBackend\)"}
WIDTH_ATTRS = ("speculative_num_draft_tokens", "num_draft_tokens", "target_verify_num_tokens_per_req")
NDT = 16
# SBD: target worker verifies 8; DFLASH_BLOCK: its draft worker verifies blocks of 8 (and may verify).
PLUGINS = EXAMPLES.replace("block_size = 16", "block_size = 8")
CASES = [("FA3", "SBD", False), ("FA3", "DFLASH_BLOCK", True), ("triton", "SBD", False), ("triton", "DFLASH_BLOCK", True)]


def release():
    return Version(probe().version)


def ignores_width(backend, is_draft_worker):
    """The decision, per release: does upstream ``backend`` lay this worker's TARGET_VERIFY out at ndt?"""
    if backend == "FA3":  # 0.5.16+: the hook for the draft worker only
        return not is_draft_worker or release() < Version("0.5.16")
    return release() < Version("0.5.17")  # triton 0.5.17-0.5.20: the verify input's width; 0.5.21+: the hook


def stores_width(backend, is_draft_worker):
    """Does upstream ``backend`` store this worker's width (not ndt) in ``__init__``? triton 0.5.17-0.5.20
    store ndt but lay each verify batch out at its verify input's width (test_capture_input, test_widths_by_batch_size)."""
    if backend == "FA3":
        return not ignores_width(backend, is_draft_worker)
    return release() >= Version("0.5.21")  # triton: the hook for both workers


@pytest.fixture
def backends(monkeypatch):
    """The backend classes, importable on a CPU."""
    absent_kernel_package(monkeypatch, "sgl_kernel")  # FA3 imports merge_state_v2 unguarded at its top; only its forward calls it
    return {name: getattr(importlib.import_module(MODULES[name]), CLASSES[name]) for name in MODULES}


@pytest.fixture
def patched():
    apply_all(PATCHES, probe().version)
    yield
    revert_all(PATCHES)


@contextlib.contextmanager
def published(algorithm):
    """Server args carrying ``algorithm`` at NDT, published where the release's backends read them:
    the runtime-context test override (0.5.16+), else only ``model_runner.server_args``."""
    fields = dict(speculative_algorithm=algorithm, speculative_num_draft_tokens=NDT,
                  speculative_num_steps=NDT - 1, speculative_eagle_topk=1)
    try:
        from sglang.srt.runtime_context import get_context, get_parallel
    except ImportError:  # up to 0.5.13
        get_context = None
    if get_context is None or not hasattr(get_context(), "override_server_args"):
        yield types.SimpleNamespace(kv_cache_dtype="auto", **fields)
        return
    with get_context().override_server_args(**fields) as server_args, get_parallel().override(attn_tp_size=1):
        yield server_args


def model_runner(algorithm, is_draft_worker, server_args):
    """The fields the backends read before storing their width, with the release's
    own ``ModelRunner.decode_num_tokens_per_req`` bound where it has one."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    pool = types.SimpleNamespace(size=4, req_to_token=torch.zeros(4, 64, dtype=torch.int32))
    mr = types.SimpleNamespace(
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm), is_draft_worker=is_draft_worker,
        server_args=server_args, device="cpu", gpu_id=0, page_size=1, sliding_window_size=None,
        req_to_token_pool=pool, token_to_kv_pool=types.SimpleNamespace(), token_to_kv_pool_allocator=types.SimpleNamespace(),
        kv_cache_dtype=torch.bfloat16, kv_cache_dtype_str="auto", kv_index_translator=None,
        attn_cp_size=1, ps=types.SimpleNamespace(attn_cp_size=1),  # FA3's context-parallel size: read here up to 0.5.15, from ps 0.5.16-0.5.20
        model_config=types.SimpleNamespace(is_encoder_decoder=False, context_len=64, attention_arch=None, hf_config=None,
                                           is_local_attention_model=False),
    )
    if hasattr(ModelRunner, "decode_num_tokens_per_req"):
        mr.decode_num_tokens_per_req = types.MethodType(ModelRunner.decode_num_tokens_per_req, mr)
    return mr


class _Stored(BaseException):
    """Stops ``__init__`` (a BaseException: SGLang's ``except Exception`` cannot swallow it)."""


def stored_width(cls, algorithm, is_draft_worker):
    """Start building ``cls`` for ``algorithm`` at NDT and return the TARGET_VERIFY width it stored."""
    init = inspect.unwrap(cls.__init__)  # the release's own __init__ (the wrapper, if applied, runs first)
    tree = ast.parse(textwrap.dedent(inspect.getsource(init))).body[0]
    stores = [stmt for stmt in tree.body if any(
        isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.attr in WIDTH_ATTRS for n in ast.walk(stmt))]
    last = max(stmt.end_lineno for stmt in stores) + init.__code__.co_firstlineno - 1

    def in_init(frame, event, arg):
        if event == "line" and frame.f_lineno > last:
            raise _Stored
        return in_init

    backend = cls.__new__(cls)
    with published(algorithm) as server_args:
        mr = model_runner(algorithm, is_draft_worker, server_args)
        previous = sys.gettrace()
        sys.settrace(lambda frame, event, arg: in_init if frame.f_code is init.__code__ else None)
        try:
            cls.__init__(backend, mr)
        except _Stored:
            pass
        finally:
            sys.settrace(previous)
    # triton 0.5.21+ keeps ndt in num_draft_tokens and the width in target_verify_num_tokens_per_req
    return getattr(backend, "target_verify_num_tokens_per_req", None) or getattr(
        backend, "speculative_num_draft_tokens", None) or backend.num_draft_tokens


def test_plans_follow_the_release(backends):
    found = report(probe())
    for name, patch in (("FA3", FA3), ("triton", TRITON)):
        ignored = [w for w in (False, True) if ignores_width(name, w)]
        assert patch.plan(probe().version).verdict == ("apply" if ignored else "not needed")
        expected = {1: "refused for widths != ndt on the target worker",
                    2: "refused for widths != ndt on the target and draft workers"}.get(len(ignored), "supported")
        assert found[patch.name] == expected


@pytest.mark.parametrize("backend,algorithm,is_draft_worker", CASES)
def test_upstream_stores_ndt_exactly_where_the_guard_refuses(sglang_loaded, backends, backend, algorithm, is_draft_worker):
    """Without the patches: the width the release's backend stores is ndt (the
    plugin's 8 is ignored) wherever the decision refuses, and the plugin's 8 where
    the backend takes it from the hook."""
    sglang_loaded(PLUGINS)
    revert_all(PATCHES)  # as upstream ships it, whether or not the loader applied them
    assert not (ignores_width(backend, is_draft_worker) and stores_width(backend, is_draft_worker))
    expected = 8 if stores_width(backend, is_draft_worker) else NDT
    assert stored_width(backends[backend], algorithm, is_draft_worker) == expected


@pytest.mark.parametrize("backend,algorithm,is_draft_worker", CASES)
def test_guard_refuses_an_ignored_width(sglang_loaded, backends, patched, backend, algorithm, is_draft_worker):
    sglang_loaded(PLUGINS)
    if not ignores_width(backend, is_draft_worker):
        expected = 8 if stores_width(backend, is_draft_worker) else NDT  # upstream takes it: built as before
        assert stored_width(backends[backend], algorithm, is_draft_worker) == expected
        return
    worker = "draft" if is_draft_worker else "target"
    with pytest.raises(EngineError, match=rf"algorithm {algorithm} \(plugin '\w+'\) verifies 8 tokens per request on the {worker} "
                       rf"worker at speculative_num_draft_tokens={NDT}, but SGLang {re.escape(probe().version)}'s {LABELS[backend]} "
                       rf"attention backend lays TARGET_VERIFY out at speculative_num_draft_tokens"):
        stored_width(backends[backend], algorithm, is_draft_worker)


ABOVE = PLUGINS.replace("max_tokens_per_req = 16", "max_tokens_per_req = 32").replace("verify_width = 8", "verify_width = 24")
"""SBD's target worker verifies 24 tokens per request, above ndt (16)."""


@pytest.mark.parametrize("backend", ["FA3", "triton"])
def test_guard_refuses_a_width_above_ndt(sglang_loaded, backends, patched, backend):
    """A wider verify is as ignored as a narrower one (the guard compares with !=)."""
    sglang_loaded(ABOVE)
    if not ignores_width(backend, False):
        assert stored_width(backends[backend], "SBD", False) == (24 if stores_width(backend, False) else NDT)
        return
    with pytest.raises(EngineError, match=rf"algorithm SBD \(plugin 'sbd'\) verifies 24 tokens per request on the target "
                       rf"worker at speculative_num_draft_tokens={NDT}, but SGLang {re.escape(probe().version)}'s "
                       rf"{LABELS[backend]} attention backend lays TARGET_VERIFY out at speculative_num_draft_tokens"):
        stored_width(backends[backend], "SBD", False)


@pytest.mark.parametrize("backend", ["FA3", "triton"])
def test_guard_passes_builtin_algorithms_and_widths_equal_to_ndt(sglang_loaded, backends, patched, backend):
    sglang_loaded(PLUGINS.replace("verify_width = 8", f"verify_width = {NDT}"))
    assert stored_width(backends[backend], "SBD", False) == NDT
    assert stored_width(backends[backend], "EAGLE", False) == NDT


def test_unknown_shape_is_refused():
    for patch in PATCHES:
        assert patch.condition("def __init__(self, model_runner):\n    pass\n")[0] == "refused"


def test_the_guard_waits_for_sglang_to_import_the_backend():
    """Applying imports nothing (FA3 cannot even be imported on this CPU); the
    wrapper is installed when SGLang first imports the backend module."""
    code = (
        "import sys\n"
        "from sglang_spec_plugins.testing.cpu import install_stand_ins; install_stand_ins()\n"
        "from sglang_spec_plugins.engine.probe import probe\n"
        "from sglang_spec_plugins.patches.fa3 import PATCHES\n"
        "from sglang_spec_plugins.patches.unit import apply_all\n"
        f"module = {MODULES['FA3']!r}\n"
        "plans = apply_all(PATCHES, probe().version)\n"
        "assert module not in sys.modules\n"
        "import pytest; from sglang_spec_plugins.testing.cpu import absent_kernel_package; absent_kernel_package(pytest.MonkeyPatch(), 'sgl_kernel')\n"
        "import importlib; fa3 = importlib.import_module(module)\n"
        "print(plans['backends.fa3'].verdict, hasattr(fa3.FlashAttentionBackend.__init__, '__wrapped__'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["apply", "True"]
