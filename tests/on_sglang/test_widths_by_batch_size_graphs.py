"""Widths by batch size through SGLang's own decode CUDA-graph runner and real
attention backends: each captured size at its bucket's width (the release's
own capture method, patched by ``widths_by_batch_size``), and the attention oracle
on flashinfer, triton and trtllm_mha at every width after every switch,
eager, capture and replay, as a batch grows and shrinks (capture_harness);
backends that cannot serve them are refused at start-up by name."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (see test_trtllm_mha)

import copy
import inspect
import re
import sys
import textwrap
import types

import pytest
import torch
from packaging.version import Version

import capture_harness as ch
import runner_drive
from sglang_spec_plugins.testing import trtllm as h
from sglang_spec_plugins.patches import widths_by_batch_size
from sglang_spec_plugins.patches.unit import revert_all
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.patches.attention_support import attention_support
from sglang_spec_plugins.patches.attention_support import WIDTHS_BY_BATCH_BACKENDS
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize, WidthSchedule, graph_size, padded_size

NDT, MAX_WIDTH = 4, 6
BUCKETS = {1: 6, 2: 4, 4: 2}
CAPTURED = [1, 2, 3, 4]
RELEASE = probe().version

PLUGIN = textwrap.dedent("""
    from sglang_spec_plugins import AlgorithmSpec, hookimpl

    class Worker:
        pass

    @hookimpl
    def sgl_spec_algorithms():
        return [AlgorithmSpec(name="BY_BATCH", worker_factory=lambda server_args: Worker)]
    """)

TOML = f"""
[plugins]
enable = ["bybatch"]
[algorithms.BY_BATCH]
max_tokens_per_req = {MAX_WIDTH}
widths_by_batch_size = {{ {", ".join(f"{k} = {v}" for k, v in BUCKETS.items())} }}
"""


@pytest.fixture
def algorithm(site, sglang_loaded):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    site.add("bybatch-drafter", {"bybatch": "bybatch_mod"}, {"bybatch_mod": PLUGIN})
    sglang_loaded(TOML)
    return SpeculativeAlgorithm.from_string("BY_BATCH")


def captured_tokens(runner, size):
    """``(num_tokens, width after, width during)``: the tokens the release's own
    capture method (as the class holds it now) computes for ``size``, run up to
    that line, the runner's width attribute after the call and at that line."""
    method = getattr(type(runner), "capture_one_shape", None) or type(runner).capture_one_batch_size
    original = inspect.unwrap(method)
    source, first = inspect.getsourcelines(original)
    line = first + next(i for i, text in enumerate(source) if text.strip().startswith("num_tokens ="))
    seen = {}

    def tracer(frame, event, arg):
        if frame.f_code is not original.__code__:
            return None

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno > line:
                seen.update(frame.f_locals, width=getattr(runner, widths_by_batch_size.width_attribute(runner)))
                raise runner_drive._PastTheBlock
            return local

        return local

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        method(runner, size, lambda *a, **k: None)
    except runner_drive._PastTheBlock:
        pass
    finally:
        sys.settrace(previous)
    return seen["num_tokens"], getattr(runner, widths_by_batch_size.width_attribute(runner)), seen["width"]


def state_at_entry(method, runner, *args):
    """(capture sizes, width) the runner shows when the release's own ``method``
    (as the class holds it now: wrapped by the loader or not) starts running;
    None if it never starts (a wrapper answered without it)."""
    original = inspect.unwrap(method)
    seen = []

    def tracer(frame, event, arg):
        if frame.f_code is original.__code__:
            seen.append((list(runner.capture_bs), getattr(runner, widths_by_batch_size.width_attribute(runner))))
            raise runner_drive._PastTheBlock
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        method(runner, *args)
    except runner_drive._PastTheBlock:
        pass
    finally:
        sys.settrace(previous)
    return seen[0] if seen else None


def verify_batch(bs, width):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return types.SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs,
                                 input_ids=torch.zeros(bs * width, dtype=torch.int64))


def built_runner(algorithm):
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
        runner = runner_drive.graph_runner(algorithm, False, server_args)
    runner.capture_bs = list(CAPTURED)
    runner.speculative_num_draft_tokens = NDT
    # Read by the capture method before its width line up to 0.5.13: the input buffers, a CUDA graph
    # object and the capture stream (none exists on a CPU; nothing here uses them before the line).
    runner.buffers, runner.stream, runner._create_device_graph = None, None, lambda: None
    return runner


def test_each_size_is_captured_at_its_bucket_s_width(algorithm):
    runner = built_runner(algorithm)
    assert getattr(runner, widths_by_batch_size.width_attribute(runner)) == MAX_WIDTH  # sized with the largest
    for size in CAPTURED:
        tokens, after, _ = captured_tokens(runner, size)
        assert tokens == size * WidthsByBatchSize.parse(BUCKETS).at(size)
        assert after == MAX_WIDTH  # put back after the capture


def test_without_the_patch_every_size_is_captured_at_the_largest_width(algorithm):
    runner = built_runner(algorithm)
    revert_all(list(widths_by_batch_size.PATCHES))
    assert [captured_tokens(runner, s)[0] for s in CAPTURED] == [s * MAX_WIDTH for s in CAPTURED]


def replay_methods(runner):
    """The release's can-run, load and replay methods (their names up to 0.5.13 / from 0.5.14)."""
    cls = type(runner)
    names = (("can_run_graph", "load_batch", "execute") if hasattr(cls, "load_batch") else ("can_run", "replay_prepare", "replay"))
    return [getattr(cls, n) for n in names]


def test_a_replay_sees_the_graphs_of_the_batch_s_width(algorithm):
    """Each replay method of the release runs with the runner showing only the graphs captured at the
    batch's width, at that width, so that its own padding picks the right graph; a batch no graph of its
    width holds is refused before the release's check runs (eager)."""
    runner = built_runner(algorithm)
    for method in replay_methods(runner):
        assert state_at_entry(method, runner, verify_batch(3, 2)) == ([4], 2)  # 3 requests at width 2: graph 4
        assert state_at_entry(method, runner, verify_batch(1, 4)) == ([2, 3], 4)  # held at width 4: graph 2
    can_run = replay_methods(runner)[0]
    assert can_run(runner, verify_batch(2, 6)) is False  # width 6 is captured only for 1 request
    assert state_at_entry(can_run, runner, verify_batch(2, 6)) is None
    assert runner.capture_bs == CAPTURED and getattr(runner, widths_by_batch_size.width_attribute(runner)) == MAX_WIDTH


@pytest.mark.parametrize("padding", [True, False], ids=["padding", "disable_padding"])
def test_the_can_run_check_refuses_exactly_the_batches_no_graph_of_their_width_holds(algorithm, padding):
    """Every batch size and width of the buckets: the release's own can-run check runs (at the batch's graphs)
    where a graph captured at the batch's width holds the batch (the same size, with padding disabled), and
    the batch runs eagerly (False, the release's check not run) everywhere else."""
    runner = built_runner(algorithm)
    runner.disable_padding = not padding
    can_run = replay_methods(runner)[0]
    buckets = WidthsByBatchSize.parse(BUCKETS)
    for bs in range(1, max(CAPTURED) + 2):
        for width in buckets.candidates:
            size = graph_size(buckets, bs, width, CAPTURED)
            held = size is not None and (padding or size == bs)
            entered = state_at_entry(can_run, runner, verify_batch(bs, width))
            assert (entered is not None) == held, (bs, width, size, entered)
            if not held:
                assert can_run(runner, verify_batch(bs, width)) is False, (bs, width)


def test_a_recapture_during_a_replay_captures_every_size(algorithm):
    runner = built_runner(algorithm)
    widths_by_batch_size.buckets_of(runner)
    with widths_by_batch_size.at_width(runner, 2):  # as inside a replay, where recapture_if_needed may capture again
        assert state_at_entry(type(runner).capture, runner) == (CAPTURED, MAX_WIDTH)


def test_without_the_patch_a_replay_sees_every_graph_at_the_largest_width(algorithm):
    runner = built_runner(algorithm)
    revert_all(list(widths_by_batch_size.PATCHES))
    for method in replay_methods(runner):
        assert state_at_entry(method, runner, verify_batch(3, 2)) == (CAPTURED, MAX_WIDTH)


def test_replay_pads_over_the_graphs_of_the_batch_s_width(algorithm):
    """What the runner's own padding sees inside a replay: only the sizes captured at the batch's width."""
    runner = built_runner(algorithm)
    assert widths_by_batch_size.buckets_of(runner) is not None
    with widths_by_batch_size.at_width(runner, 2):
        assert runner.capture_bs == [4] and getattr(runner, widths_by_batch_size.width_attribute(runner)) == 2
    with widths_by_batch_size.at_width(runner, 4):
        assert runner.capture_bs == [2, 3]
    assert runner.capture_bs == CAPTURED


def test_backends_not_proven_with_widths_by_batch_are_refused_at_start_up(algorithm):
    from sglang_spec_plugins.errors import EngineError
    from sglang_spec_plugins.patches import backend_gate

    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
        mr = runner_drive.model_runner(algorithm, False, server_args)
        # aiter serves or is patched for every one of these widths on every release: refused for the buckets
        with pytest.raises(EngineError, match=r"algorithm BY_BATCH \(plugin 'bybatch'\) verifies 6 tokens per request .* "
                                              r"aiter attention backend is not proven with widths by batch size "
                                              r"\(\{1 = 6, 2 = 4, 4 = 2\}; proven on: flashinfer, triton, trtllm_mha\)"):
            backend_gate.check("aiter", mr)
        with pytest.raises(EngineError, match=r"algorithm BY_BATCH \(plugin 'bybatch'\) verifies [246] tokens per "
                                              r"request .* fa3 attention backend "):  # FA3 ignores the target's width
            backend_gate.check("fa3", mr)
        backend_gate.check("trtllm_mha", mr)
        backend_gate.check("flashinfer", mr)


def test_a_backend_that_ignores_a_width_is_refused(algorithm):
    """triton up to 0.5.16 lays every TARGET_VERIFY out at ndt: the first bucket width other than ndt
    is refused by name at start-up; from 0.5.17 it takes each width and passes."""
    from sglang_spec_plugins.errors import EngineError
    from sglang_spec_plugins.patches import backend_gate

    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
        mr = runner_drive.model_runner(algorithm, False, server_args)
        if Version(RELEASE) >= Version("0.5.17"):
            backend_gate.check("triton", mr)
            return
        with pytest.raises(EngineError, match=rf"algorithm BY_BATCH \(plugin 'bybatch'\) verifies 2 tokens per request shaped as a chain "
                                              rf"on the target worker at speculative_num_draft_tokens={NDT}, but SGLang "
                                              rf"{re.escape(RELEASE)}'s triton attention backend lays TARGET_VERIFY out at "
                                              rf"speculative_num_draft_tokens"):
            backend_gate.check("triton", mr)


@pytest.mark.parametrize("backend", sorted(WIDTHS_BY_BATCH_BACKENDS))
def test_attention_holds_at_every_width_as_the_batch_grows_and_shrinks(monkeypatch, algorithm, backend):
    """One backend, graphs captured per size at the width the release's capture method
    (as the loader wraps it) shows, with the runner's own ``get_spec_info``; then a
    sequence of steps whose width the worker's schedule picks, each replayed on the
    graph the release's replay method pads it to (and run eagerly too), compared with
    attention from the batch definition. A replay runs as a CUDA graph does: the
    backend's replay metadata first, then the forward with the metadata captured
    for that size (its tensors as the replay refilled them, the rest as captured)."""
    if backend == "triton" and attention_support("triton", 2, NDT).verdict == "refused":
        pytest.skip(f"SGLang {RELEASE}'s triton lays TARGET_VERIFY out at ndt: widths by batch size are refused "
                    "(test_a_backend_that_ignores_a_width_is_refused)")
    buckets = WidthsByBatchSize.parse(BUCKETS)
    gen = torch.Generator().manual_seed(7)
    ch.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    with ch.published(monkeypatch, backend, "BY_BATCH", NDT, max(CAPTURED)) as server_args:
        attn = ch.build_backend(backend, server_args, algorithm, max(CAPTURED), MAX_WIDTH)
        runner = ch.graph_runner_for(algorithm, server_args, attn, max(CAPTURED))
        runner.capture_bs, runner.speculative_num_draft_tokens = list(CAPTURED), NDT
        runner.stream, runner._create_device_graph = None, lambda: None  # read before the width line up to 0.5.13
        assert widths_by_batch_size.buckets_of(runner) == buckets
        graphs, widths = {}, {}
        for size in reversed(CAPTURED):  # as SGLang captures: largest first
            tokens, _, width = captured_tokens(runner, size)
            with widths_by_batch_size.at_width(runner, width, sizes=tuple(CAPTURED)):
                info = type(runner).get_spec_info(runner, tokens)
            assert info.draft_token_num == width == tokens // size
            capture = h.make_batch(attn, [0] * size, width, gen)
            fb = ch.forward_batch(capture, attn, info, algorithm)
            h.init_metadata(attn, fb, "capture")
            ch.forward(attn, fb, capture)
            graphs[size], widths[size] = copy.copy(attn.forward_metadata), width
        can_run, load, _ = replay_methods(runner)
        schedule = WidthSchedule(buckets, CAPTURED, hold_steps=1)
        seen = []
        for bs in (1, 2, 4, 3, 1, 1, 4, 2, 2, 1):
            width = schedule.width(bs)
            seen.append(width)
            assert state_at_entry(can_run, runner, verify_batch(bs, width)) is not None  # the release's own check decides
            sizes, _ = state_at_entry(load, runner, verify_batch(bs, width))
            size = padded_size(bs, sizes)  # the graph the release's replay pads the batch to
            assert widths[size] == width, f"a batch of {bs} at width {width} replays the graph of {size} captured at {widths[size]}"
            for phase, n in (("replay", size), ("eager", bs)):
                prefixes = torch.randint(1, 20, (n,), generator=gen).tolist()
                batch = h.make_batch(attn, prefixes, width, gen)
                fb = ch.forward_batch(batch, attn, ch.worker_input("chain", width, None), algorithm)
                if hasattr(fb.spec_info, "live_seq_lens_cpu"):  # 0.5.22+: a chain verify's seq_lens_cpu are KV lengths
                    fb.seq_lens_cpu = fb.seq_lens_cpu + width
                h.init_metadata(attn, fb, phase)
                if phase == "replay":
                    attn.forward_metadata = copy.copy(graphs[size])
                out = ch.forward(attn, fb, batch)
                ref = ch.reference(batch, attn, [torch.ones(width, width, dtype=torch.bool).tril()] * n)
                torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4, msg=f"{phase} bs={n} width={width}")
        assert seen == [6, 4, 2, 2, 6, 6, 2, 2, 4, 4]  # shrinking waits one step


def test_a_worker_s_schedule_follows_the_runner_s_graphs(algorithm):
    runner = built_runner(algorithm)
    mr = runner.model_runner
    mr.graph_runner = mr.decode_cuda_graph_runner = runner
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT):
        schedule = widths_by_batch_size.schedule_for(mr, hold_steps=1)
    assert schedule.capture_sizes == tuple(CAPTURED)
    assert [schedule.width(n) for n in (1, 4, 2, 2)] == [6, 2, 2, 4]  # shrinking waits one step
    mr.decode_cuda_graph_runner = mr.graph_runner = None  # eager
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT):
        assert widths_by_batch_size.schedule_for(mr).capture_sizes is None


def test_step_widths_read_the_graphs_captured_after_the_worker_was_built(algorithm):
    """A worker builds StepWidths in ``__init__``, before SGLang captures the target's
    decode graphs; its first step reads them: with graphs for 1, 2 and 4, a batch
    of 3 replays the graph for 4, so it takes bucket 4's width (2), not its own (4)."""
    from sglang_spec_plugins.worker import StepWidths

    runner = built_runner(algorithm)
    runner.capture_bs = [1, 2, 4]
    mr = runner.model_runner
    mr.graph_runner = mr.decode_cuda_graph_runner = None  # not captured yet
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT):
        widths = StepWidths(mr)
        assert widths.maximum == MAX_WIDTH
        mr.graph_runner = mr.decode_cuda_graph_runner = runner  # captured
        assert [widths.at(n) for n in (1, 3, 2)] == [6, 2, 4]
        mr.graph_runner = mr.decode_cuda_graph_runner = None
        assert [StepWidths(mr).at(n) for n in (1, 3, 2)] == [6, 4, 4]  # eager: each batch at its own bucket
