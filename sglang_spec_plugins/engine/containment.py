"""A drafter's faults while serving, contained: the server goes on, every request stays exact.

The worker bases call a drafter's code (its hooks) through :meth:`Containment.call`
and check what it returns before any of it reaches SGLang or a GPU. A fault
(an exception of any kind, ``SystemExit`` included, or an answer of the wrong
type, count, width or token range) never leaves the step: the base goes on
without that drafter answer, which keeps every request exact (verification
decides what commits, whatever the drafts; a request without drafts verifies
its root alone, plain decoding). Each step with a fault is logged once, naming
the plugin, its distribution, the hook and the request. After ``limit``
faulted steps the drafter is switched off for the process (one log line) and
the worker serves plainly. A step whose drafter code took longer than
:data:`SLOW_STEP_S` is logged, naming the plugin (at most once a minute).
``KeyboardInterrupt`` is not a fault: it stops the process as before.

:func:`sync_check` is how a step proves it never makes the host wait for
the GPU: with ``SGLANG_SPEC_PLUGINS_SYNC_CHECK=1`` on a CUDA device, torch
raises at the first call inside it that synchronises (``.item()``,
``.tolist()``, ``.cpu()`` of a device tensor, a blocking copy to the device,
...), naming the line; a step's documented reads of the step before it are
made inside :func:`allowed_sync`. On a CPU, where nothing waits, the check
raises at the one wait a CPU can still see in the bases' and drafters' code: a
blocking copy to a device (``.to(device)`` or ``.cuda()`` without
``non_blocking=True``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import time
from typing import Any, Callable, Iterator, List, Optional

logger = logging.getLogger("sglang_spec_plugins")

SLOW_STEP_S = 1.0
"""Seconds of drafter code in one step past which the step is logged as slow."""

SLOW_LOG_INTERVAL_S = 60.0
"""Seconds between two slow-step lines."""

SYNC_CHECK_ENV = "SGLANG_SPEC_PLUGINS_SYNC_CHECK"
"""``1``: a step's own code runs under ``torch.cuda.set_sync_debug_mode("error")`` (:func:`sync_check`)."""

FAULT = object()
"""What :meth:`Containment.call` returns in place of a faulted hook's answer."""


def shown_rid(req: Any) -> str:
    """A request's id as messages quote it (escaped: a client chooses it)."""
    return ascii(str(getattr(req, "rid", "?")))


class Containment:
    """The faults of one worker's drafter (``policy``: its algorithm's, which names the plugin)."""

    def __init__(self, policy: Any, limit: int, clock: Callable[[], float] = time.perf_counter):
        self.policy = policy
        self.limit = limit
        self.off = False
        self.faulted_steps = 0
        self._clock = clock
        self._faults: List[str] = []
        self._spent = 0.0
        self._last_slow = -SLOW_LOG_INTERVAL_S

    def begin(self) -> None:
        """A step starts."""
        self._faults.clear()
        self._spent = 0.0

    def call(self, hook: str, code: Callable[..., Any], *args: Any, req: Any = None) -> Any:
        """``code(*args)``, or :data:`FAULT` (recorded) where it raises anything but ``KeyboardInterrupt``."""
        started = self._clock()
        try:
            return code(*args)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: the drafter's, not the server's
            self.fault(hook, f"raised {type(exc).__name__}: {self._text(exc)}", req)
            return FAULT
        finally:
            self._spent += self._clock() - started

    def fault(self, hook: str, what: str, req: Any = None) -> None:
        """Record that ``hook`` (for ``req``, where it concerns one) ``what``."""
        concerning = f" for request {shown_rid(req)}" if req is not None else ""
        self._faults.append(f"{hook}{concerning} {what}")

    @property
    def faulted(self) -> bool:
        """Whether this step had a fault so far."""
        return bool(self._faults)

    def end(self) -> None:
        """The step ends: log its faults and slowness; switch the drafter off past the limit."""
        if self._faults:
            self.faulted_steps += 1
            more = f" (and {len(self._faults) - 1} more faults in this step)" if len(self._faults) > 1 else ""
            logger.warning("%s; the step went on without it, every request exact%s",
                           self.policy.fault(self._faults[0]), more)
            if not self.off and self.faulted_steps > self.limit:
                self.off = True
                logger.error("%s", self.policy.fault(
                    f"switched off for this process after {self.faulted_steps} faulted steps (max_faulted_steps = "
                    f"{self.limit}); its requests are served without drafts, exactly"))
        now = self._clock()
        if self._spent > SLOW_STEP_S and now - self._last_slow >= SLOW_LOG_INTERVAL_S:
            self._last_slow = now
            logger.warning("%s", self.policy.fault(
                f"its code took {self._spent:.1f} s in one decode step (more than {SLOW_STEP_S:g} s); the step waited"))

    def refusal(self, own: Callable[[Any], Any], base: Callable[[Any], Optional[str]], req: Any) -> Optional[str]:
        """The drafter's own ``refusal(req)`` (``own``), guarded: where the drafter is off, or its
        answer faults or is neither a str nor None, ``base(req)`` (what the release cannot serve)."""
        if self.off:
            return base(req)
        why = self.call("refusal(req)", own, req, req=req)
        if why is FAULT or not (why is None or isinstance(why, str)):
            if why is not FAULT:
                self.fault("refusal(req)", f"returned a {type(why).__name__}, not a str or None", req)
            return base(req)
        return why

    def _text(self, exc: BaseException) -> str:
        """An exception's message, escaped; one this drafter's own framework calls raised
        (``StepWidths.at``, say) without the plugin's name the line starts with anyway."""
        from ..errors import PluginError

        try:
            text = str(exc)
            if isinstance(exc, PluginError) and exc.plugin == self.policy.plugin:
                text = exc.detail.removeprefix(f"algorithm {self.policy.algorithm}: ")
        except Exception:
            text = f"<{type(exc).__name__} whose str() raised>"
        return ascii(text)[1:-1] if text else "(no message)"


@contextlib.contextmanager
def sync_check(device: Any) -> Iterator[None]:
    """Inside: any call that makes the host wait for a CUDA ``device`` raises, where
    :data:`SYNC_CHECK_ENV` is ``1`` (else nothing changes); on a CPU ``device``, a
    blocking copy to a device raises (:func:`blocking_copy`)."""
    if os.environ.get(SYNC_CHECK_ENV) != "1":
        yield
        return
    import torch

    if not str(device).startswith("cuda"):
        with _blocking_copies()():
            yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


_WAITS_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("waits_allowed", default=False)


@contextlib.contextmanager
def allowed_sync() -> Iterator[None]:
    """Inside a :func:`sync_check`: a read the step documents (of the step before it) may wait."""
    import torch

    before = torch.cuda.get_sync_debug_mode() if torch.cuda.is_available() else 0
    if before:
        torch.cuda.set_sync_debug_mode(0)
    token = _WAITS_ALLOWED.set(True)
    try:
        yield
    finally:
        _WAITS_ALLOWED.reset(token)
        if before:
            torch.cuda.set_sync_debug_mode(before)


def blocking_copy(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a torch call copies to a device without ``non_blocking=True``: ``Tensor.to``
    given a device (a ``str`` or ``torch.device``, positional or ``device=``), or
    ``Tensor.cuda``. On a GPU such a copy of a host tensor waits for the device."""
    import torch

    if func is not torch.Tensor.cuda and not (func is torch.Tensor.to and (
            "device" in kwargs or any(isinstance(a, (str, torch.device)) for a in args[1:2]))):
        return False
    return not kwargs.get("non_blocking", False) and True not in args[2:]


@functools.lru_cache(maxsize=None)
def _blocking_copies() -> Any:
    """The torch function mode in which a :func:`blocking_copy` made by code outside SGLang
    (the bases', a drafter's) raises, outside :func:`allowed_sync`. A CPU cannot tell
    a host tensor from one already on the device (where CUDA does not wait), so SGLang's
    own code, which a GPU's check judges, is left out."""
    import sys

    from torch.overrides import TorchFunctionMode

    class BlockingCopies(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not _WAITS_ALLOWED.get() and blocking_copy(func, args, kwargs) \
                    and not sys._getframe(1).f_globals.get("__name__", "").startswith("sglang."):
                raise RuntimeError(f"called a synchronizing CUDA operation: Tensor.{func.__name__} to a device without "
                                   "non_blocking=True (a blocking copy waits for the GPU)")
            return func(*args, **kwargs)

    return BlockingCopies
