"""Drive the real SGLang code that decides the TARGET_VERIFY width, on a CPU,
without a model, on any supported release.

A driver runs the release's own function (the decode CUDA-graph runner's
``__init__``, the dummy run), as the class holds it now (so the loader's
patched version where the loader patched it), on a ``SimpleNamespace`` model
runner, and stops it at the first line after its
``if ...spec_algorithm.is_speculative():`` block: by then SGLang has decided
the capture forward mode, the width and the draft-worker gate. Nothing of
SGLang is re-implemented: a driver supplies inputs and reads what SGLang
computed.

The config is real: a ``ServerArgs`` published the release's own way (see
:func:`published`). Stand-ins, each for what a live server would hold:

* the model runner: a ``SimpleNamespace`` with the fields the code reads
  before the block (all releases), the release's own ``ModelRunner`` width
  helper bound to it;
* the attention TP size 1 and rank 0 of a one-GPU server, which SGLang reads
  from process groups a CPU test has not built: through SGLang's own test
  override ``get_parallel().override(...)`` (needed 0.5.14-0.5.21), and by
  replacing ``get_attention_tp_size``/``get_attention_tp_rank`` in the
  runner's module where the runner calls them (up to 0.5.15).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import sys
import textwrap
import types

import pytest

from sglang_spec_plugins.engine.probe import probe, resolve_method

# Module-level getters that assert an initialised process group, and the
# answer of a single-process server.
_PARALLEL_GETTERS = {"get_attention_tp_size": 1, "get_attention_tp_rank": 0}


@contextlib.contextmanager
def published(**fields):
    """Yield a real ``ServerArgs`` carrying ``fields``, published where the
    release reads its config: SGLang's test override
    ``get_context().override_server_args`` (0.5.16+); before that, the
    scheduler's global server args (``model_runner.server_args`` is the
    caller's to set, see :func:`model_runner`)."""
    runtime = _runtime_context()
    if runtime and hasattr(runtime.RuntimeContext, "override_server_args"):
        with runtime.get_context().override_server_args(**fields) as server_args:
            yield server_args
        return
    from sglang.srt import server_args as module

    server_args = module.ServerArgs(model_path="dummy")
    for name, value in fields.items():  # a plain dataclass on these releases
        setattr(server_args, name, value)
    if hasattr(module, "_global_server_args"):  # where the setter below stores it
        holder, slot = module, "_global_server_args"
    else:  # 0.5.15: in the runtime context
        holder, slot = runtime.get_context(), "_server_args"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(holder, slot, getattr(holder, slot))  # to put it back after
        module.set_global_server_args_for_scheduler(server_args)
        yield server_args


def _runtime_context():
    """SGLang's ``runtime_context`` module (0.5.14+), or None."""
    if importlib.util.find_spec("sglang.srt.runtime_context") is None:
        return None
    return importlib.import_module("sglang.srt.runtime_context")


def as_raw_input(server_args, fields):
    """Make ``fields`` the record's raw (operator) values too: on some releases (0.5.19, 0.5.23) a
    published override is a resolution declaration, and the record's own fields keep their defaults."""
    setter = object.__setattr__
    try:
        import msgspec

        if isinstance(server_args, msgspec.Struct):  # 0.5.23: a Struct whose own __setattr__ guards fields
            setter = msgspec.Struct.__setattr__
    except ImportError:
        pass
    for name, value in fields.items():
        if getattr(server_args, name, None) != value:
            setter(server_args, name, value)


def model_runner(algo, is_draft_worker, server_args):
    """The model-runner stand-in, with the release's ``ModelRunner`` width
    helper bound to it (``decode_num_tokens_per_req`` 0.5.16+,
    ``decode_num_tokens_per_bs`` 0.5.15)."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    mr = types.SimpleNamespace(
        spec_algorithm=algo,
        is_draft_worker=is_draft_worker,
        server_args=server_args,
        is_generation=True,
        device="cpu",
        attn_backend=None,  # the graph runner only stores it before the block
        lora_manager=None,  # 0.5.23
        use_ngram_embedding=False,  # up to 0.5.15
        ngram_embedding_manager=types.SimpleNamespace(enabled=False),  # 0.5.16+
        model_config=types.SimpleNamespace(is_encoder_decoder=False, hf_config=None),
    )
    for name in ("decode_num_tokens_per_req", "decode_num_tokens_per_bs"):
        if hasattr(ModelRunner, name):
            setattr(mr, name, types.MethodType(getattr(ModelRunner, name), mr))
    return mr


def graph_runner(algo, is_draft_worker, server_args):
    """The release's decode CUDA-graph runner, its ``__init__`` run up to the
    end of its speculative block on the model-runner stand-in."""
    owner, _, init = _located(probe().graph_runner)
    runner = owner.__new__(owner)
    with _single_process(init):
        _run_through_spec_block(init, runner, model_runner(algo, is_draft_worker, server_args))
    return runner


def graph_table(runner):
    """Give the runner the graph table its ``__init__`` makes after the speculative block:
    ``graphs``/``output_buffers`` up to 0.5.13, a runner backend's ``_graphs``/``_outputs``
    from 0.5.14 (the release's own FullCudaGraphBackend, its CUDA state left unmade)."""
    if hasattr(type(runner), "load_batch"):  # 0.5.14+
        module = importlib.import_module("sglang.srt.model_executor.runner_backend.full_cuda_graph_backend")
        backend = object.__new__(module.FullCudaGraphBackend)
        backend._graphs, backend._outputs = {}, {}
        runner.backend = backend
    else:
        runner.graphs, runner.output_buffers = {}, {}


def graph_runner_width(algo, is_draft_worker, server_args):
    """(width, capture forward mode) of the release's decode CUDA-graph runner."""
    runner = graph_runner(algo, is_draft_worker, server_args)
    # num_tokens_per_bs up to 0.5.15, captured_req_width from 0.5.16
    width = getattr(runner, "captured_req_width", None) or runner.num_tokens_per_bs
    return width, runner.capture_forward_mode


def dummy_run_width(algo, is_draft_worker, server_args):
    """(tokens per request, forward mode) of the release's dummy (warm-up) run."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    owner, _, dummy_run = _located(probe().dummy_run)
    mr = model_runner(algo, is_draft_worker, server_args)
    # A ModelRunner method up to 0.5.13; from 0.5.14 a BaseRunner method that reads self.model_runner.
    this = mr if owner is ModelRunner else types.SimpleNamespace(model_runner=mr)
    kwargs = {"buffers": None} if "buffers" in inspect.signature(dummy_run).parameters else {}
    with _single_process(dummy_run):
        local = _run_through_spec_block(dummy_run, this, 1, **kwargs)  # batch size 1
    # num_tokens_per_bs up to 0.5.15, num_tokens_per_req from 0.5.16
    width = local["num_tokens_per_req"] if "num_tokens_per_req" in local else local["num_tokens_per_bs"]
    return width, local["capture_forward_mode"]


def target_verify():
    """``ForwardMode.TARGET_VERIFY`` of the installed release."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ForwardMode.TARGET_VERIFY


def _located(where):
    """``(class, attribute, function)`` the class holds now for ``module:Class.method``."""
    module, _, qualname = where.partition(":")
    return resolve_method(module, qualname)


@contextlib.contextmanager
def _single_process(func):
    """Answer the attention-parallel questions of a one-GPU server (see the module doc)."""
    runtime = _runtime_context()
    with pytest.MonkeyPatch.context() as mp, (
        runtime.get_parallel().override(attn_tp_size=1, attn_tp_rank=0) if runtime else contextlib.nullcontext()
    ):
        for name, value in _PARALLEL_GETTERS.items():
            if name in func.__globals__:
                mp.setitem(func.__globals__, name, lambda value=value: value)
        yield


class _PastTheBlock(BaseException):
    """Stops the driven function (a BaseException, so SGLang's ``except Exception`` cannot swallow it)."""


def _run_through_spec_block(func, *args, **kwargs):
    """Call ``func`` and stop it at the first line after its
    ``if ...spec_algorithm.is_speculative():`` body; return its locals there."""
    return run_until(func, _spec_block_last_line(func), *args, **kwargs)


def run_until(func, last_line, *args, **kwargs):
    """Call ``func`` and stop it at its first line after file line
    ``last_line``; return its locals there."""
    code = func.__code__
    stopped_at = {}

    def in_func(frame, event, arg):
        if event == "line" and frame.f_lineno > last_line:
            stopped_at.update(frame.f_locals)
            raise _PastTheBlock
        return in_func

    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: in_func if frame.f_code is code else None)
    try:
        func(*args, **kwargs)
    except _PastTheBlock:
        return stopped_at
    finally:
        sys.settrace(previous)
    raise AssertionError(f"{func.__qualname__} returned before line {last_line}")


def _spec_block_last_line(func):
    """File line number of the last line of the body of the first
    ``if ...spec_algorithm.is_speculative()`` in ``func`` (a patched function
    keeps the original's file and line numbers)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    blocks = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.If) and _asks_is_speculative(node.test)),
        key=lambda node: node.lineno,
    )
    assert blocks, f"{func.__qualname__} has no `if ...spec_algorithm.is_speculative():`"
    return blocks[0].body[-1].end_lineno + func.__code__.co_firstlineno - 1


def _asks_is_speculative(test):
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "is_speculative"
        and ast.unparse(node.func.value).endswith("spec_algorithm")
        for node in ast.walk(test)
    )
