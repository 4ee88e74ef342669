"""Widths by batch size through SGLang's own decode CUDA-graph runner and real
attention backends: every captured size once per width of its bucket, each
(size, width) graph with its own per-size state (the release's own capture,
can-run, load and replay methods as the loader wraps them,
``widths_by_batch_size``), and the attention oracle on flashinfer, triton,
trtllm_mha and aiter at every width after every switch of width and batch
size, eager, capture and replay (capture_harness); backends that cannot serve
them are refused at start-up by name."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (see test_trtllm_mha)

from sglang_spec_plugins.testing import aiter as aiter_harness  # noqa: E402  (sets TRITON_INTERPRET before triton)

import copy  # noqa: E402
import inspect  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import types  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from packaging.version import Version  # noqa: E402

import capture_harness as ch  # noqa: E402
import runner_drive  # noqa: E402
from sglang_spec_plugins.testing import trtllm as h  # noqa: E402
from sglang_spec_plugins.patches import widths_by_batch_size  # noqa: E402
from sglang_spec_plugins.patches.unit import revert_all  # noqa: E402
from sglang_spec_plugins.engine.probe import probe  # noqa: E402
from sglang_spec_plugins.patches.attention_support import attention_support  # noqa: E402
from sglang_spec_plugins.patches.attention_support import WIDTHS_BY_BATCH_BACKENDS  # noqa: E402
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize, WidthSchedule, graph_pairs, graph_size, padded_size  # noqa: E402

NDT, MAX_WIDTH = 4, 6
CAPTURED = [1, 2, 3, 4]
TABLES = {
    "one width per size": {1: 6, 2: 4, 4: 2},
    "widths to choose from": {1: [2, 6], 2: [1, 4], 4: [2, 3]},
}
"""The second: sizes 2 and 3 have graphs at widths 1 and 4, size 4 at 2 and 3, size 1 at 2 and 6;
width 2 is in two buckets, so a batch of 3 at width 2 replays the graph of 4."""
CHOOSING = WidthsByBatchSize.parse(TABLES["widths to choose from"])
RELEASE = probe().version

PLUGIN = textwrap.dedent("""
    from sglang_spec_plugins import AlgorithmSpec, hookimpl

    class Worker:
        pass

    @hookimpl
    def sgl_spec_algorithms():
        return [AlgorithmSpec(name="BY_BATCH", worker_factory=lambda server_args: Worker)]
    """)


def toml(table):
    widths = ", ".join(f"{k} = {v}" for k, v in table.items())
    return f"""
[plugins]
enable = ["bybatch"]
[algorithms.BY_BATCH]
max_tokens_per_req = {MAX_WIDTH}
widths_by_batch_size = {{ {widths} }}
"""


@pytest.fixture
def load(site, sglang_loaded):
    """``load(table)`` -> the BY_BATCH plugin algorithm with those widths by batch size."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    site.add("bybatch-drafter", {"bybatch": "bybatch_mod"}, {"bybatch_mod": PLUGIN})

    def loaded(table):
        sglang_loaded(toml(table))
        return SpeculativeAlgorithm.from_string("BY_BATCH")

    return loaded


@pytest.fixture
def algorithm(load):
    return load(TABLES["widths to choose from"])


def captured_tokens(runner, size):
    """``(num_tokens, width during)``: the tokens the release's own capture method
    (``capture_one_shape``/``capture_one_batch_size``) computes for ``size``, run up
    to that line, and the runner's width attribute there."""
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
    return seen["num_tokens"], seen["width"]


def inside(method, runner, *args, then=None):
    """Run the release's own ``method`` (as the class holds it now: wrapped by the
    loader or not) up to its first line; there call ``then()`` (default: read the
    runner's capture sizes and width) and stop it. Returns what ``then`` gave, or
    None if the method never starts (a wrapper answered without it)."""
    original = inspect.unwrap(method)
    seen = []
    look = then or (lambda: (list(runner.capture_bs), getattr(runner, widths_by_batch_size.width_attribute(runner))))

    def tracer(frame, event, arg):
        if frame.f_code is original.__code__:
            seen.append(look())
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


def graphs_now(runner):
    return runner.backend._graphs if hasattr(type(runner), "load_batch") else runner.graphs


def built_runner(algorithm):
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
        runner = runner_drive.graph_runner(algorithm, False, server_args)
    runner.capture_bs = list(CAPTURED)
    runner.speculative_num_draft_tokens = NDT
    # Read by the capture method before its width line up to 0.5.13: the input buffers, a CUDA graph
    # object and the capture stream (none exists on a CPU; nothing here uses them before the line).
    runner.buffers, runner.stream, runner._create_device_graph = None, None, lambda: None
    runner_drive.graph_table(runner)
    return runner


def test_the_runner_is_sized_with_the_largest_width_and_the_capture_is_the_loaders(algorithm):
    runner = built_runner(algorithm)
    assert getattr(runner, widths_by_batch_size.width_attribute(runner)) == MAX_WIDTH
    capture = type(runner).capture
    assert capture.__wrapped__ is inspect.unwrap(capture) and capture is not inspect.unwrap(capture)
    revert_all(list(widths_by_batch_size.PATCHES))
    assert type(runner).capture is inspect.unwrap(capture)


def test_the_capture_runs_once_per_width_over_its_sizes_each_into_its_own_table(algorithm):
    """What the release's whole capture (CUDA-only: here the record of what it would capture, at the
    width and over the sizes the runner shows, into the graph table the runner shows) sees on each
    pass the loader makes: widest first, the sizes with a graph at that width, and a table of that
    width's own, so that a size captured at two widths keeps both graphs."""
    runner = built_runner(algorithm)
    outside = graphs_now(runner)
    passes = []

    def release_capture():
        width = getattr(runner, widths_by_batch_size.width_attribute(runner))
        passes.append((width, list(runner.capture_bs)))
        for size in reversed(runner.capture_bs):
            tokens, seen = captured_tokens(runner, size)  # the release's own per-size capture, to its width line
            graphs_now(runner)[size] = ("graph", size, seen, tokens)

    widths_by_batch_size.capture_every_width(runner, release_capture)
    assert passes == [(6, [1]), (4, [2, 3]), (3, [4]), (2, [1, 4]), (1, [2, 3])]
    assert runner.capture_bs == CAPTURED and getattr(runner, widths_by_batch_size.width_attribute(runner)) == MAX_WIDTH
    assert graphs_now(runner) is outside and outside == {}  # outside a width, SGLang's own table is untouched
    for width in CHOOSING.candidates:
        with widths_by_batch_size.at_width(runner, width):
            sizes = [s for s in CAPTURED if width in CHOOSING.widths_at(s)]
            assert graphs_now(runner) == {s: ("graph", s, width, s * width) for s in sizes}
    assert sorted((s, w) for w in CHOOSING.candidates for s in CAPTURED if w in CHOOSING.widths_at(s)) == \
        sorted(graph_pairs(CHOOSING, CAPTURED))


def test_one_width_per_size_shares_sglang_s_own_table(load):
    runner = built_runner(load(TABLES["one width per size"]))
    outside = graphs_now(runner)
    widths_by_batch_size.capture_every_width(runner, lambda: graphs_now(runner).update(
        {s: getattr(runner, widths_by_batch_size.width_attribute(runner)) for s in runner.capture_bs}))
    assert outside == {1: 6, 2: 4, 3: 4, 4: 2} and graphs_now(runner) is outside


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
        assert inside(method, runner, verify_batch(3, 2)) == ([1, 4], 2)  # 3 requests at width 2: graph 4
        assert inside(method, runner, verify_batch(2, 1)) == ([2, 3], 1)
        assert inside(method, runner, verify_batch(1, 4)) == ([2, 3], 4)  # held at width 4: graph 2
    can_run = replay_methods(runner)[0]
    assert can_run(runner, verify_batch(2, 6)) is False  # width 6 is captured only for 1 request
    assert can_run(runner, verify_batch(4, 1)) is False  # width 1 only for 2 and 3
    assert inside(can_run, runner, verify_batch(2, 6)) is None
    assert runner.capture_bs == CAPTURED and getattr(runner, widths_by_batch_size.width_attribute(runner)) == MAX_WIDTH


@pytest.mark.parametrize("padding", [True, False], ids=["padding", "disable_padding"])
def test_the_can_run_check_refuses_exactly_the_batches_no_graph_of_their_width_holds(algorithm, padding):
    """Every batch size and width of the CHOOSING: the release's own can-run check runs (at the batch's graphs)
    where a graph captured at the batch's width holds the batch (the same size, with padding disabled), and
    the batch runs eagerly (False, the release's check not run) everywhere else."""
    runner = built_runner(algorithm)
    runner.disable_padding = not padding
    can_run = replay_methods(runner)[0]
    for bs in range(1, max(CAPTURED) + 2):
        for width in CHOOSING.candidates:
            size = graph_size(CHOOSING, bs, width, CAPTURED)
            held = size is not None and (padding or size == bs)
            entered = inside(can_run, runner, verify_batch(bs, width))
            assert (entered is not None) == held, (bs, width, size, entered)
            if not held:
                assert can_run(runner, verify_batch(bs, width)) is False, (bs, width)


def test_a_recapture_during_a_replay_captures_every_width(algorithm):
    runner = built_runner(algorithm)
    seen = []
    with widths_by_batch_size.at_width(runner, 2):  # as inside a replay, where recapture_if_needed may capture again
        widths_by_batch_size.capture_every_width(runner, lambda: seen.append(
            getattr(runner, widths_by_batch_size.width_attribute(runner))))
        assert runner.capture_bs == [1, 4]
    assert seen == [6, 4, 3, 2, 1]


def test_without_the_patch_a_replay_sees_every_graph_at_the_largest_width(algorithm):
    runner = built_runner(algorithm)
    revert_all(list(widths_by_batch_size.PATCHES))
    for method in replay_methods(runner):
        assert inside(method, runner, verify_batch(3, 2)) == (CAPTURED, MAX_WIDTH)


def test_backends_not_proven_with_widths_by_batch_are_refused_at_start_up(load):
    from sglang_spec_plugins.errors import EngineError
    from sglang_spec_plugins.patches import backend_gate

    algorithm = load({1: 4, 2: 4})
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
        mr = runner_drive.model_runner(algorithm, False, server_args)
        # a backend the project has not examined serves SGLang's own layout (a chain at ndt), not widths by batch size
        with pytest.raises(EngineError, match=r"algorithm BY_BATCH \(plugin 'bybatch'\) verifies 4 tokens per request .* "
                                              r"torch_native attention backend is not proven with widths by batch size "
                                              r"\(\{1 = 4, 2 = 4\}; proven on: aiter, flashinfer, triton, trtllm_mha\)"):
            backend_gate.check("torch_native", mr)


def test_backends_serving_widths_by_batch_size_and_those_refusing_them(algorithm):
    from sglang_spec_plugins.errors import EngineError
    from sglang_spec_plugins.patches import backend_gate

    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
        mr = runner_drive.model_runner(algorithm, False, server_args)
        with pytest.raises(EngineError, match=r"algorithm BY_BATCH \(plugin 'bybatch'\) verifies [12346] tokens per "
                                              r"request .* fa3 attention backend "):  # FA3 ignores the target's width
            backend_gate.check("fa3", mr)
        for served in ("trtllm_mha", "flashinfer", "aiter"):
            backend_gate.check(served, mr)
        mr.use_mla_backend = True  # aiter's MLA kernels take ndt only
        with pytest.raises(EngineError, match=r"aiter_mla attention backend"):
            backend_gate.check("aiter", mr)


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
        with pytest.raises(EngineError, match=rf"algorithm BY_BATCH \(plugin 'bybatch'\) verifies 1 tokens per request shaped as a chain "
                                              rf"on the target worker at speculative_num_draft_tokens={NDT}, but SGLang "
                                              rf"{re.escape(RELEASE)}'s triton attention backend lays TARGET_VERIFY out at "
                                              rf"speculative_num_draft_tokens"):
            backend_gate.check("triton", mr)


def capture_each_pair(runner, attn, algorithm, gen, capture_metadata):
    """Every (size, width) graph, as the loader's capture runs the release's: per width,
    widest first, each size of the runner's list largest first, at the width and with
    the tokens the release's capture method computes, the runner's own ``get_spec_info``
    for the verify input, then ``capture_metadata(size, width, info)`` (the backend's
    capture metadata and forward). Returns ``{(size, width): captured forward_metadata}``."""
    graphs = {}

    def capture():
        for size in reversed(runner.capture_bs):
            tokens, width = captured_tokens(runner, size)
            info = type(runner).get_spec_info(runner, tokens)
            assert info.draft_token_num == width == tokens // size
            capture_metadata(size, width, info)
            graphs[size, width] = copy.copy(attn.forward_metadata)

    widths_by_batch_size.capture_every_width(runner, capture)
    return graphs


def steps_of(table):
    """A sequence of (batch size, width) that switches width at one batch size and batch size at one
    width, with steps no graph serves (eager): each step's width among its bucket's (a drafter's
    choice) or, for one width per size, the schedule's."""
    if not WidthsByBatchSize.parse(table).chooses:
        schedule = WidthSchedule(WidthsByBatchSize.parse(table), CAPTURED, hold_steps=1)
        return [(bs, schedule.width(bs)) for bs in (1, 2, 4, 3, 1, 1, 4, 2, 2, 1)]
    return [(1, 6), (1, 2), (2, 4), (2, 1), (3, 1), (3, 2), (4, 3), (4, 2), (1, 4), (2, 6), (3, 3), (1, 1)]


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("backend", sorted(WIDTHS_BY_BATCH_BACKENDS - {"aiter"}))
def test_attention_holds_at_every_width_as_the_batch_grows_and_shrinks(monkeypatch, load, backend, table):
    """One backend, a graph captured per (size, width) through its real capture metadata; then steps
    switching width and batch size, each replayed through the release's own load method (as the
    loader wraps it: the backend's replay metadata runs inside it) on the graph the release pads it
    to, and run eagerly too, compared with attention from the batch definition. A replay runs as a
    CUDA graph does: the backend's replay metadata first, then the forward with the metadata
    captured for that (size, width) (its tensors as the replay refilled them, the rest as captured)."""
    if backend == "triton" and attention_support("triton", 2, NDT).verdict == "refused":
        pytest.skip(f"SGLang {RELEASE}'s triton lays TARGET_VERIFY out at ndt: widths by batch size are refused "
                    "(test_a_backend_that_ignores_a_width_is_refused)")
    buckets = WidthsByBatchSize.parse(TABLES[table])
    algorithm = load(TABLES[table])
    gen = torch.Generator().manual_seed(7)
    ch.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    with ch.published(monkeypatch, backend, "BY_BATCH", NDT, max(CAPTURED)) as server_args:
        attn = ch.build_backend(backend, server_args, algorithm, max(CAPTURED), MAX_WIDTH)
        runner = ch.graph_runner_for(algorithm, server_args, attn, max(CAPTURED))
        runner.capture_bs, runner.speculative_num_draft_tokens = list(CAPTURED), NDT
        runner.stream, runner._create_device_graph = None, lambda: None  # read before the width line up to 0.5.13
        runner_drive.graph_table(runner)
        assert widths_by_batch_size.buckets_of(runner) == buckets

        def capture_metadata(size, width, info):
            batch = h.make_batch(attn, [0] * size, width, gen)
            fb = ch.forward_batch(batch, attn, info, algorithm)
            h.init_metadata(attn, fb, "capture")
            ch.forward(attn, fb, batch)

        graphs = capture_each_pair(runner, attn, algorithm, gen, capture_metadata)
        assert sorted(graphs) == sorted(graph_pairs(buckets, CAPTURED))

        def attend(n, width, phase, size=None):
            prefixes = torch.randint(1, 20, (n,), generator=gen).tolist()
            batch = h.make_batch(attn, prefixes, width, gen)
            fb = ch.forward_batch(batch, attn, ch.worker_input("chain", width, None), algorithm)
            if hasattr(fb.spec_info, "live_seq_lens_cpu"):  # 0.5.22+: a chain verify's seq_lens_cpu are KV lengths
                fb.seq_lens_cpu = fb.seq_lens_cpu + width
            h.init_metadata(attn, fb, phase)
            if phase == "replay":
                attn.forward_metadata = copy.copy(graphs[size, width])
            out = ch.forward(attn, fb, batch)
            ref = ch.reference(batch, attn, [torch.ones(width, width, dtype=torch.bool).tril()] * n)
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4, msg=f"{phase} bs={n} width={width}")

        def replay(bs, width):
            size = padded_size(bs, runner.capture_bs)  # the graph the release's replay pads the batch to
            assert (size, width) in graphs, f"a batch of {bs} at width {width} replays the graph of {size}"
            attend(size, width, "replay", size)
            return size

        can_run, load_batch, _ = replay_methods(runner)
        seen = []
        for bs, width in steps_of(TABLES[table]):
            if inside(can_run, runner, verify_batch(bs, width)) is None:  # no graph of this width holds it
                seen.append((bs, width, None))
            else:
                seen.append((bs, width, inside(load_batch, runner, verify_batch(bs, width), then=lambda: replay(bs, width))))
            attend(bs, width, "eager")
        if table == "widths to choose from":
            assert seen == [(1, 6, 1), (1, 2, 1), (2, 4, 2), (2, 1, 2), (3, 1, 3), (3, 2, 4), (4, 3, 4), (4, 2, 4),
                            (1, 4, 2), (2, 6, None), (3, 3, 4), (1, 1, 2)]
        else:
            assert [w for _, w, _ in seen] == [6, 4, 2, 2, 6, 6, 2, 2, 4, 4]  # shrinking waits one step


def test_aiter_attention_holds_at_every_width_as_the_batch_grows_and_shrinks(monkeypatch, algorithm):
    """The same on aiter (non-MLA, its unified verify path), through its CPU harness: one real
    AiterAttnBackend, every (size, width) graph captured through its own capture metadata, each step
    replayed through the release's load method on its graph, and eagerly."""
    from sglang_spec_plugins.patches import aiter as aiter_patches

    harness = aiter_harness.Harness(monkeypatch, ndt=NDT, spec_algorithm=algorithm, max_reqs=max(CAPTURED) + 4)
    try:
        backend = harness.backend()
        harness.init_graphs(backend, max(CAPTURED))
        with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT) as server_args:
            runner = ch.graph_runner_for(algorithm, server_args, backend, max(CAPTURED))
        runner.capture_bs, runner.speculative_num_draft_tokens = list(CAPTURED), NDT
        runner.stream, runner._create_device_graph = None, lambda: None
        runner_drive.graph_table(runner)
        gen = torch.Generator().manual_seed(3)

        def capture_metadata(size, width, info):
            batch = harness.batch([5] * size, width, seed=size * 10 + width)
            fb = batch.forward_batch(harness)
            harness.capture(backend, fb)

        graphs = capture_each_pair(runner, backend, algorithm, gen, capture_metadata)
        assert sorted(graphs) == sorted(graph_pairs(CHOOSING, CAPTURED))
        if aiter_patches.GRAPH_CAPTURE_0512.plan(RELEASE).verdict == "apply":  # 0.5.12.x: each width's captured widths
            with widths_by_batch_size.at_width(runner, 2):
                assert vars(backend)[aiter_patches.CAPTURED_WIDTHS] == {1: 2, 4: 2}

        def attend(n, width, phase, size=None):
            prefix = torch.randint(0, aiter_harness.CONTEXT_LEN - MAX_WIDTH, (n,), generator=gen).tolist()
            batch = harness.batch(prefix, width, seed=int(torch.randint(0, 1 << 30, (1,), generator=gen)))
            fb = batch.forward_batch(harness)
            if phase == "eager":
                harness.eager(backend, fb)
            else:
                harness.replay(backend, fb)
                backend.forward_metadata = copy.copy(graphs[size, width])
            out = harness.attend(backend, batch, fb)
            torch.testing.assert_close(out, batch.expected(harness), atol=1e-5, rtol=0, msg=f"{phase} bs={n} width={width}")

        def replay(bs, width):
            size = padded_size(bs, runner.capture_bs)
            attend(size, width, "replay", size)
            return size

        can_run, load_batch, _ = replay_methods(runner)
        seen = []
        for bs, width in steps_of(TABLES["widths to choose from"]):
            if inside(can_run, runner, verify_batch(bs, width)) is None:
                seen.append(None)
            else:
                seen.append(inside(load_batch, runner, verify_batch(bs, width), then=lambda: replay(bs, width)))
            attend(bs, width, "eager")
        assert seen == [1, 1, 2, 2, 3, 4, 4, 4, 2, None, 4, 2]
    finally:
        harness.close()


def test_a_worker_s_schedule_follows_the_runner_s_graphs(load):
    runner = built_runner(load(TABLES["one width per size"]))
    mr = runner.model_runner
    mr.graph_runner = mr.decode_cuda_graph_runner = runner
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT):
        schedule = widths_by_batch_size.schedule_for(mr, NDT, hold_steps=1)
    assert schedule.capture_sizes == tuple(CAPTURED)
    assert [schedule.width(n) for n in (1, 4, 2, 2)] == [6, 2, 2, 4]  # shrinking waits one step
    mr.decode_cuda_graph_runner = mr.graph_runner = None  # eager
    with runner_drive.published(speculative_algorithm="BY_BATCH", speculative_num_draft_tokens=NDT):
        assert widths_by_batch_size.schedule_for(mr, NDT).capture_sizes is None


def test_step_widths_read_the_graphs_captured_after_the_worker_was_built(load):
    """A worker builds StepWidths in ``__init__``, before SGLang captures the target's
    decode graphs; its first step reads them: with graphs for 1, 2 and 4, a batch
    of 3 replays the graph for 4, so it takes bucket 4's width (2), not its own (4)."""
    from sglang_spec_plugins.worker import StepWidths

    runner = built_runner(load(TABLES["one width per size"]))
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
