"""Per-step widths on the real SGLang source: the model runner runs a plugin's TARGET_VERIFY only
at a declared width (``verify_batch.declared_widths`` on the release's own ``ModelRunner.forward``),
and ``StepWidths`` (the worker's API) lets a worker choose among its declared widths, or the
acceptance controller choose for it from the accept counts it records, agreed across ranks."""

import socket
import sys
import textwrap
import time
import types

import pytest
import torch

import runner_drive
from sglang_spec_plugins.errors import PluginError
from sglang_spec_plugins.patches import verify_batch
from sglang_spec_plugins.patches.unit import revert_all
from sglang_spec_plugins.verify_layout import VerifyLayoutError

NDT = 4
PLUGIN = textwrap.dedent("""
    from sglang_spec_plugins import AlgorithmSpec, hookimpl

    class Worker:
        pass

    @hookimpl
    def sgl_spec_algorithms():
        return [AlgorithmSpec(name="PER_STEP", worker_factory=lambda server_args: Worker)]
    """)


def toml(extra=""):
    return ('[plugins]\nenable = ["perstep"]\n[algorithms.PER_STEP]\nmax_tokens_per_req = 8\n'
            'widths_by_batch_size = {1 = [1, 2, 4, 8], 4 = [1, 2]}\n' + extra)


@pytest.fixture
def load(site, sglang_loaded):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    site.add("perstep-drafter", {"perstep": "perstep_mod"}, {"perstep_mod": PLUGIN})

    def loaded(extra=""):
        sglang_loaded(toml(extra))
        return SpeculativeAlgorithm.from_string("PER_STEP")

    return loaded


def verify_batch_of(bs, width, algorithm):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return types.SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, spec_algorithm=algorithm,
                                 input_ids=torch.zeros(bs * width, dtype=torch.int64))


def reaches_forward(model_runner, forward_batch):
    """Whether the release's own ModelRunner.forward (as the class holds it now) starts running."""
    import inspect

    from sglang.srt.model_executor.model_runner import ModelRunner

    original = inspect.unwrap(ModelRunner.forward)
    started = []

    def tracer(frame, event, arg):
        if frame.f_code is original.__code__:
            started.append(True)
            raise runner_drive._PastTheBlock
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        ModelRunner.forward(model_runner, forward_batch)
    except runner_drive._PastTheBlock:
        pass
    finally:
        sys.settrace(previous)
    return bool(started)


def test_the_model_runner_runs_a_verify_only_at_a_declared_width(load):
    algorithm = load()
    with runner_drive.published(speculative_algorithm="PER_STEP", speculative_num_draft_tokens=NDT) as server_args:
        mr = runner_drive.model_runner(algorithm, False, server_args)
        for width in (1, 2, 4, 8):
            assert reaches_forward(mr, verify_batch_of(3, width, algorithm))
        with pytest.raises(VerifyLayoutError, match=r"model runner: a TARGET_VERIFY batch of 3 requests at width 3, which "
                                                    r"algorithm PER_STEP \(plugin perstep\) does not declare on the target "
                                                    r"worker at speculative_num_draft_tokens=4 \(declared: 1, 2, 4, 8, from "
                                                    r"\[algorithms.PER_STEP\] widths_by_batch_size in .*plugins.toml\)"):
            reaches_forward(mr, verify_batch_of(3, 3, algorithm))
        uneven = verify_batch_of(3, 3, algorithm)
        uneven.input_ids = torch.zeros(10, dtype=torch.int64)
        with pytest.raises(VerifyLayoutError, match="do not split evenly"):
            reaches_forward(mr, uneven)
        revert_all(list(verify_batch.PATCHES))
        assert reaches_forward(mr, verify_batch_of(3, 3, algorithm))  # the release itself would run it


class Clock:
    """A clock the test moves: what a step takes is what the test says it takes."""

    def __init__(self):
        self.seconds = 0.0

    def __call__(self):
        return self.seconds


def step_widths(algorithm, graphs=None, now=time.perf_counter, overlap=False):
    from sglang_spec_plugins.worker import StepWidths

    with runner_drive.published(speculative_algorithm="PER_STEP", speculative_num_draft_tokens=NDT,
                                disable_overlap_schedule=not overlap) as server_args:
        mr = runner_drive.model_runner(algorithm, False, server_args)
        mr.graph_runner = mr.decode_cuda_graph_runner = graphs
        return StepWidths(mr, now=now)


def test_a_worker_chooses_among_its_declared_widths(load):
    widths = step_widths(load())
    assert widths.declared == (1, 2, 4, 8) and widths.maximum == 8
    assert widths.at(2) == 8 and widths.latest == 8  # nobody chooses: the bucket's largest
    assert widths.at(2, 2) == 2 and widths.latest == 2
    assert widths.at(5, 8) == 8  # declared (bucket 1's): eager, or a larger graph of that width
    assert widths.choices(2) == (1, 2, 4, 8) and widths.choices(5) == (1, 2)
    with pytest.raises(PluginError, match=r"plugin 'perstep' \(perstep-drafter==1.0\): algorithm PER_STEP: "
                                          r"StepWidths.at\(2, width=3\): the algorithm declares widths 1, 2, 4, 8 on the "
                                          r"target worker at speculative_num_draft_tokens=4, not 3"):
        widths.at(2, 3)
    with pytest.raises(PluginError, match=r"not 4.0"):
        widths.at(2, 4.0)
    widths.record(torch.tensor([1, 2]))  # without the controller: nothing to feed


def serve(widths, clock, steps, batch, committed_of):
    """``steps`` steps of ``batch`` requests: each takes 2 ms and 2 ms per token of its width on
    ``clock`` (a verify whose cost grows with its tokens), 0.5 ms between steps, and commits
    ``committed_of(width)`` tokens per request."""
    seen = []
    for _ in range(steps):
        clock.seconds += 0.0005
        width = widths.at(batch)
        seen.append(width)
        clock.seconds += 0.002 + 0.002 * width
        widths.record(torch.full((batch,), committed_of(width), dtype=torch.int32))
    return seen


def test_the_acceptance_controller_follows_the_accept_counts(load):
    """A plugins.toml widths_by_acceptance, steps whose cost grows with the width (timed on a clock
    the test moves): nothing accepted takes a slot down to plain decoding; everything accepted
    then, found by the probe from width 1, takes it up to its widest."""
    clock = Clock()
    widths = step_widths(load("widths_by_acceptance = {warmup_steps = 2, interval_steps = 2, probe_after = 3}\n"), now=clock)
    rejected = serve(widths, clock, 12, 2, lambda width: 1)
    # from the middle candidate down at the first decision (step 4), probing again after 3 decisions at width 1
    assert rejected == [2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 2, 2], rejected
    accepted = serve(widths, clock, 40, 2, lambda width: width)
    assert accepted[-1] == 8, accepted
    assert serve(widths, clock, 1, 6, lambda width: width) == [1]  # another slot (4+ requests): its own middle candidate


@pytest.mark.parametrize("padding", [True, False], ids=["padding", "disable_padding"])
def test_the_controller_times_a_step_at_the_graph_size_it_replays(load, padding):
    """The release's decode graph runner, its graphs captured for 1, 2, 4 and 8 (bucket 1's widths 1, 2, 4, 8
    at 1 and 2; bucket 4's 1 and 2 at 4 and 8): a step's size, what the controller times it by, is the
    captured size whose graph at the step's width holds the batch (with SGLang's disable_padding, only a graph
    of the batch's own size), else (eager) the batch's own size."""
    algorithm = load("widths_by_acceptance = true\n")
    with runner_drive.published(speculative_algorithm="PER_STEP", speculative_num_draft_tokens=NDT) as server_args:
        graphs = runner_drive.graph_runner(algorithm, False, server_args)
    graphs.capture_bs, graphs.disable_padding = [1, 2, 4, 8], not padding
    runner_drive.graph_table(graphs)
    clock = Clock()
    widths = step_widths(algorithm, graphs, now=clock)
    controller, seen = widths._controller, []
    observe = controller.observe

    def spied(slot, width, committed, requests, size=None):
        seen.append((requests, width, size))
        observe(slot, width, committed, requests, size)

    controller.observe = spied
    for batch, chosen in [(3, None), (5, None), (9, None), (3, 8), (2, 4), (1, None), (8, None)]:
        widths.at(batch, chosen)
        clock.seconds += 0.01
        widths.record(torch.ones(batch, dtype=torch.int32))
    widths.at(1)  # the step recorded last is learnt at the next
    # (requests, width, size): 3 and 5 replay bucket 4's graphs of 4 and 8 at its middle width (1) (padded: with
    # padding disabled they run eagerly); 9 is above every graph; width 8 has graphs only at 1 and 2 (3 runs
    # eagerly); 2 at width 4 replays 2's; 1 at 2, 1's; 8 at 1, 8's
    padded = [(3, 1, 4), (5, 1, 8)] if padding else [(3, 1, 3), (5, 1, 5)]
    assert seen == padded + [(9, 1, 9), (3, 8, 3), (2, 4, 2), (1, 2, 1), (8, 1, 8)], seen
    line = controller.describe()  # no decision yet: nothing timed
    assert "latest size 1); 4+ requests: width 1 of [1, 2] (committed 1.00 per request, acceptance 0.50, " \
           "latest size 8)" in line, line


class LaggingDevice:
    """A device that runs each step after the host has queued it, as a GPU does: a timer whose marks
    and kept counts are readable only once the test (standing for the scheduler, which waits for a
    step's tokens before the next) says the device has finished the step. Reading one sooner is the
    host waiting for the GPU mid-step."""

    def __init__(self, clock):
        self.clock, self.step, self.finished = clock, 0, -1

    def mark(self):
        return (self.step, self.clock())

    def seconds(self, first, last):
        assert last[0] <= self.finished, "the host waited for the device in the middle of a step"
        return last[1] - first[1]

    def keep(self, count):
        device = self

        class Kept:
            def __int__(self, step=self.step):
                assert step <= device.finished, "the host read an accept count the device has not written"
                return int(count)

        return Kept()


def test_the_controller_reads_nothing_back_until_the_next_step(load, monkeypatch):
    """On a GPU, ``record`` leaves the step's accept counts and time on the device and the controller learns
    them at the next ``at``: the same widths as a host clock gives, step for step, without a read mid-step."""
    from sglang_spec_plugins.worker import step_widths as step_widths_module

    settings = "widths_by_acceptance = {warmup_steps = 2, interval_steps = 2, probe_after = 3}\n"
    host_clock = Clock()
    expected = serve(step_widths(load(settings), now=host_clock), host_clock, 30, 2, lambda width: min(width, 3))

    clock = Clock()
    device = LaggingDevice(clock)
    monkeypatch.setattr(step_widths_module, "timer_for", lambda runner_device: device)
    widths = step_widths(load(settings), now=None)  # no clock given: the runner's device times the steps
    seen = []
    for step in range(30):
        device.step = step
        clock.seconds += 0.0005
        width = widths.at(2)
        seen.append(width)
        clock.seconds += 0.002 + 0.002 * width
        widths.record(torch.full((2,), min(width, 3), dtype=torch.int32))
        device.finished = step  # the scheduler has the step's tokens: the device is done with it
    assert seen == expected and len(set(seen)) > 1, seen


def test_under_the_overlap_scheduler_no_step_waits_for_the_step_before(load, monkeypatch):
    """SGLang's overlap scheduler starts a step while the one before it still runs on the device: the
    controller then learns each step at the ``at`` after next, so that no ``at`` reads a count or a time of
    the step still running, and it chooses as it does with a host clock (there too one step later), step for
    step. Learning at the next ``at``, as without overlap, reads the running step's count: the device
    stand-in fails that read."""
    from sglang_spec_plugins.worker import step_widths as step_widths_module

    settings = "widths_by_acceptance = {warmup_steps = 2, interval_steps = 2, probe_after = 3}\n"
    host_clock = Clock()
    expected = serve(step_widths(load(settings), now=host_clock, overlap=True), host_clock, 30, 2,
                     lambda width: min(width, 3))
    sync_clock = Clock()
    synchronous = serve(step_widths(load(settings), now=sync_clock), sync_clock, 30, 2, lambda width: min(width, 3))
    assert expected != synchronous  # one step later: the decisions move by a step

    clock = Clock()
    device = LaggingDevice(clock)
    monkeypatch.setattr(step_widths_module, "timer_for", lambda runner_device: device)
    widths = step_widths(load(settings), now=None, overlap=True)
    seen = []
    for step in range(30):
        device.step = step
        device.finished = step - 2  # the step before this one is still on the device
        clock.seconds += 0.0005
        width = widths.at(2)
        seen.append(width)
        clock.seconds += 0.002 + 0.002 * width
        widths.record(torch.full((2,), min(width, 3), dtype=torch.int32))
    assert seen == expected and len(set(seen)) > 1, seen


def test_a_width_of_the_workers_own_beside_the_controller_is_said_once(load, caplog):
    """A worker that passes its own widths (``at(batch_size, width)``) while plugins.toml turns the controller
    on, without declaring ``picks_widths``: its widths are served, and one warning names the plugin and says
    the controller does not choose (with the declaration, check and the start-up check refuse the setting)."""
    widths = step_widths(load("widths_by_acceptance = true\n"), now=Clock())
    caplog.set_level("WARNING", logger="sglang_spec_plugins")
    assert [widths.at(2, 4), widths.at(2, 2), widths.at(2)] == [4, 2, 2]
    said = [r.getMessage() for r in caplog.records if "does not choose" in r.getMessage()]
    assert said == ["plugin 'perstep' (perstep-drafter==1.0): algorithm PER_STEP: the worker chose width 4 itself "
                    "(StepWidths.at(2, width=4)), so the acceptance controller plugins.toml widths_by_acceptance turns "
                    "on does not choose; a worker that picks its widths declares AlgorithmSpec(picks_widths=...), and "
                    "check and the start-up check then refuse widths_by_acceptance"], said


def test_without_widths_to_choose_from_the_controller_is_refused(site, sglang_loaded):
    from sglang_spec_plugins.errors import ConfigError

    site.add("perstep-drafter", {"perstep": "perstep_mod"}, {"perstep_mod": PLUGIN})
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sglang_loaded('[plugins]\nenable = ["perstep"]\n[algorithms.PER_STEP]\nwidths_by_batch_size = {1 = 4, 8 = 2}\n'
                  'widths_by_acceptance = true\n')
    with pytest.raises(ConfigError, match=r"\[algorithms.PER_STEP\] widths_by_acceptance in .*plugins.toml: the controller "
                                          r"chooses each step's width among its batch-size bucket's widths, but "
                                          r"\[algorithms.PER_STEP\] widths_by_batch_size in .* gives \{1 = 4, 8 = 2\}"):
        step_widths(SpeculativeAlgorithm.from_string("PER_STEP"))


def _rank(rank, port, out):
    import torch.distributed as dist

    from sglang_spec_plugins.engine.step_times import agreed

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        group = types.SimpleNamespace(world_size=2, cpu_group=dist.group.WORLD)  # SGLang's TP group coordinator's two fields
        mine = {(64, 2): 0.010 + rank * 0.002, (64, 4): 0.020 - rank * 0.004, (128, 2): 0.030 + rank * 0.010}
        out.put((rank, agreed(types.SimpleNamespace(tp_group=group), mine)))
    finally:
        dist.destroy_process_group()


def test_step_times_agree_across_tensor_parallel_ranks():
    """Two ranks with their own clocks hand the controller the same seconds (their mean)."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results[0] == results[1] == pytest.approx({(64, 2): 0.011, (64, 4): 0.018, (128, 2): 0.035})
    assert list(results[0]) == [(64, 2), (64, 4), (128, 2)]  # (size, width) order, on every rank
