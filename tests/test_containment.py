"""engine.containment on its own (no SGLang): each guarded call into drafter code, the step's log
lines naming plugin and distribution, the switch-off past ``max_faulted_steps``, the slow-step line and the
guarded ``refusal``. Through SGLang's real scheduler: tests/on_sglang/test_drafter_faults_serve.py."""

import logging
import sys
from types import SimpleNamespace

import pytest

from sglang_spec_plugins.engine.containment import FAULT, SLOW_STEP_S, Containment
from test_policy import policy_for

OWNER = "plugin 'p' (p-drafter==1.0): algorithm ALGO: "


@pytest.fixture
def contained(site, write_toml):
    clock = [0.0]
    found = Containment(policy_for(site, write_toml), limit=1, clock=lambda: clock[0])
    found.clock = clock
    return found


def _raise(exc):
    raise exc


def test_a_raising_or_exiting_hook_is_a_fault_of_the_drafter_and_logged_once_per_step(contained, caplog):
    request = SimpleNamespace(rid="r1")
    contained.begin()
    assert contained.call("drafts(req)", _raise, RuntimeError("a bug"), req=request) is FAULT
    assert contained.call("drafts(req)", sys.exit, 3, req=request) is FAULT
    assert contained.call("step_width(batch)", lambda: 4) == 4
    with caplog.at_level(logging.WARNING):
        contained.end()
    assert [r.getMessage() for r in caplog.records] == [
        OWNER + "drafts(req) for request 'r1' raised RuntimeError: a bug; the step went on without it, every request "
        "exact (and 1 more faults in this step)"]
    assert contained.faulted_steps == 1 and not contained.off


def test_keyboard_interrupt_is_the_servers_not_the_drafters(contained):
    contained.begin()
    with pytest.raises(KeyboardInterrupt):
        contained.call("drafts(req)", _raise, KeyboardInterrupt())
    assert not contained.faulted


def test_past_the_limit_the_drafter_is_switched_off_with_one_error(contained, caplog):
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            contained.begin()
            contained.fault("drafts(req)", "returned 4 tokens, not 3")
            contained.end()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [OWNER + "switched off for this process after 2 faulted steps (max_faulted_steps = 1); its "
                      "requests are served without drafts, exactly"]
    assert contained.off


def test_a_slow_step_is_logged_naming_the_plugin(contained, caplog):
    def slow():
        contained.clock[0] += SLOW_STEP_S + 0.5

    contained.begin()
    contained.call("drafts(req)", slow)
    with caplog.at_level(logging.WARNING):
        contained.end()
    assert [r.getMessage() for r in caplog.records] == [
        OWNER + f"its code took {SLOW_STEP_S + 0.5:.1f} s in one decode step (more than {SLOW_STEP_S:g} s); the step waited"]


@pytest.mark.parametrize("own, want, fault", [
    (lambda req: "no JSON here", "no JSON here", None),
    (lambda req: None, None, None),
    (lambda req: 42, "base", "refusal(req) for request 'r1' returned a int, not a str or None"),
    (lambda req: _raise(ValueError("bad")), "base", "refusal(req) for request 'r1' raised ValueError: bad"),
])
def test_a_drafters_own_refusal_is_guarded_and_falls_back_to_the_bases(contained, caplog, own, want, fault):
    request = SimpleNamespace(rid="r1")
    contained.begin()
    assert contained.refusal(own, lambda req: "base", request) == want
    with caplog.at_level(logging.WARNING):
        contained.end()
    assert [r.getMessage().split(";")[0] for r in caplog.records] == ([OWNER + fault] if fault else [])


def test_a_switched_off_drafter_is_not_asked_to_refuse(contained):
    contained.off = True
    assert contained.refusal(lambda req: _raise(AssertionError("asked")), lambda req: None, object()) is None


def test_on_a_cpu_the_sync_check_raises_at_a_blocking_copy_to_a_device(monkeypatch):
    """What torch's sync debug mode flags on a GPU, a CPU can still see in the code: ``.to(device)`` without
    ``non_blocking=True`` (found on the H100 in the penalties' table, 2026-12-07); reads the step documents
    (inside ``allowed_sync``), copies of dtype alone and SGLang's own code are left to the GPU's check."""
    torch = pytest.importorskip("torch")
    from sglang_spec_plugins.engine.containment import SYNC_CHECK_ENV, allowed_sync, sync_check

    x = torch.zeros(3)
    blocking = [lambda: x.to("cpu"), lambda: x.to(torch.device("cpu")), lambda: x.to(device="cpu"),
                lambda: x.to("cpu", torch.float64, False)]
    in_sglang = {"__name__": "sglang.srt.some_kernel", "x": x}
    with sync_check("cpu"):  # the variable unset: nothing checked
        [copy() for copy in blocking]
    monkeypatch.setenv(SYNC_CHECK_ENV, "1")
    with sync_check("cpu"):
        for copy in blocking:
            with pytest.raises(RuntimeError, match="synchronizing CUDA operation: Tensor.to to a device without "
                                                   "non_blocking=True"):
                copy()
        x.to("cpu", non_blocking=True), x.to(torch.float64), x.to("cpu", torch.float64, True)
        with allowed_sync():
            x.to("cpu")
        exec("x.to('cpu')", in_sglang)
        with pytest.raises(RuntimeError):
            x.to("cpu")  # checked again after allowed_sync
    x.to("cpu")  # and not after the check
