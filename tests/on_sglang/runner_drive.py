"""Drive the real SGLang runner code that decides the TARGET_VERIFY width,
on a CPU, without a model.

Each driver runs the release's own function (the CUDA-graph runner's
``__init__``, the dummy run) on a ``SimpleNamespace`` model runner and stops
it with an exception right after the width and draft-worker decisions, at the
first attribute access that follows them. Nothing of SGLang is re-implemented:
a driver only supplies inputs and reads what SGLang computed.
"""

from __future__ import annotations

import types


class Reached(Exception):
    """Raised by a planted attribute once SGLang has passed the decisions."""


class _RecordGe:
    """Compares as ``num_tokens <= this``: records ``num_tokens`` and stops."""

    def __ge__(self, other):
        raise Reached(other)


class _StopAtDllmAttention:
    @property
    def dllm_attention(self):
        raise Reached()


def _model_runner(algo, is_draft_worker, **extra):
    from sglang.srt.model_executor.model_runner import ModelRunner

    mr = types.SimpleNamespace(
        spec_algorithm=algo,
        is_draft_worker=is_draft_worker,
        is_generation=True,
        device="cpu",
        lora_manager=None,
        model_config=types.SimpleNamespace(is_encoder_decoder=False, hf_config=None),
        ngram_embedding_manager=types.SimpleNamespace(enabled=False),
        **extra,
    )
    mr.decode_num_tokens_per_req = types.MethodType(ModelRunner.decode_num_tokens_per_req, mr)
    return mr


def graph_runner_width(algo, is_draft_worker, server_args):
    """(width, capture forward mode) the decode CUDA-graph runner captures with."""
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    mr = _model_runner(algo, is_draft_worker, server_args=server_args, attn_backend=_StopAtDllmAttention())
    runner = DecodeCudaGraphRunner.__new__(DecodeCudaGraphRunner)
    try:
        runner.__init__(mr)
    except Reached:
        return runner.captured_req_width, runner.capture_forward_mode
    raise AssertionError("the runner's __init__ did not reach the planted stop")


def dummy_run_width(algo, is_draft_worker, batch_size=3):
    """Tokens per request the dummy (warm-up) forward uses."""
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    runner = DecodeCudaGraphRunner.__new__(DecodeCudaGraphRunner)
    runner.model_runner = _model_runner(algo, is_draft_worker)
    buffers = types.SimpleNamespace(input_ids=types.SimpleNamespace(shape=(_RecordGe(),)))
    try:
        runner._dummy_run(batch_size, buffers=buffers)
    except Reached as stop:
        num_tokens = stop.args[0]
        assert num_tokens % batch_size == 0
        return num_tokens // batch_size
    raise AssertionError("the dummy run did not reach the planted stop")
