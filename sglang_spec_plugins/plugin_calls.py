"""Running a plugin's code: what goes wrong there is the plugin's fault, by name.

Every call into a plugin (importing it, its hooks, its ``validate_server_args``
and worker factory, reading what they returned) runs inside
:func:`plugin_code`, which decides whose fault an error is:

* any exception the code lets out, of any kind (``SystemExit``, pytest's
  ``Skipped``, one whose ``str()`` itself raises), is the plugin's: a
  :class:`~.errors.PluginError` naming the plugin, its distribution and the
  call, which ``on_error = "skip"`` skips and ``check`` reports;
* ``os._exit`` called by that code (which would end the process at once,
  with no message) is refused the same way;
* a ``KeyboardInterrupt`` is no fault (it may be the operator's Ctrl-C): it
  becomes :class:`~.errors.PluginInterrupted`, still a ``KeyboardInterrupt``,
  which stops the run at once whatever ``on_error`` says, naming the plugin
  code it interrupted; the commands and the loader report it in one line,
  without a traceback;
* code still running after :data:`SLOW_S` seconds (an import that hangs) is
  named in one warning while it runs.

What plugin code prints does not reach a command's report:
:func:`report_stream` gives the report the real standard output and sends
everything else written there, at any level, to standard error.

An error raised anywhere else is this package's own: :func:`package_fault`
is how it is reported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Dict, Iterator, Optional, TextIO

from .errors import PluginError, PluginInterrupted, plugin_origin, printable, type_name

logger = logging.getLogger("sglang_spec_plugins")

SLOW_S = 10
"""Seconds after which plugin code still running is named in a warning."""


class OsExitCalled(BaseException):
    """Raised in place of ``os._exit(code)`` while plugin code runs."""

    def __init__(self, code):
        self.code = code
        super().__init__(code)


def plugin_code(plugin: str, distribution: Optional[str], what: str, *, failed: Optional[str] = None,
                doing: Optional[str] = None) -> "_PluginCode":
    """Run the ``with`` body as plugin ``plugin``'s code (see the module doc).
    ``what`` names the call in messages (``algorithm BAD: validate_server_args``);
    a fault reads ``{failed} {the exception}`` (``failed`` defaults to
    ``{what} raised``); the warning of a slow call says ``still {doing}``
    (default ``running {what}``)."""
    return _PluginCode(plugin, distribution, what, failed, doing)


class _PluginCode:
    """What :func:`plugin_code` returns: a class, not a generator, and the
    warning's line written only if it is due (the loader enters hundreds)."""

    __slots__ = ("plugin", "distribution", "what", "failed", "doing", "_me")

    def __init__(self, plugin, distribution, what, failed, doing):
        self.plugin, self.distribution, self.what, self.failed, self.doing = plugin, distribution, what, failed, doing

    def slow_line(self) -> str:
        return printable(f"{plugin_origin(self.plugin, self.distribution)}: still {self.doing or 'running ' + self.what} "
                         f"after {SLOW_S} s")

    def __enter__(self) -> None:
        self._me = _running.enter(self)

    def __exit__(self, kind, exc, tb) -> bool:
        _running.leave(self, self._me)
        if exc is None or isinstance(exc, PluginInterrupted):
            return False
        if isinstance(exc, KeyboardInterrupt):
            raise PluginInterrupted(self.plugin, f"{self.what} was interrupted (KeyboardInterrupt)", self.distribution) from exc
        raise PluginError(self.plugin, f"{self.failed or self.what + ' raised'} {describe_exception(exc)}",
                          self.distribution) from exc


def describe_exception(exc: BaseException) -> str:
    """How a message names an exception plugin code raised (:func:`~.errors.printable`)."""
    if isinstance(exc, OsExitCalled):
        return (f"os._exit (it called os._exit({exc.code!r}), which ends the process at once, with status {exc.code!r} "
                "and no message; a plugin must raise instead)")
    if isinstance(exc, SystemExit):
        return f"SystemExit (it called sys.exit({exc.code!r}))"
    name = type(exc).__name__ if isinstance(exc, Exception) else type_name(exc)
    try:
        text = printable(f"{name}: {exc}")
    except Exception as unshown:  # its __str__ raises
        return printable(f"{name} (its message cannot be shown: str() of it raised {type(unshown).__name__}: {unshown})")
    if not isinstance(exc, Exception):  # e.g. pytest.skip(allow_module_level=True) outside pytest
        return f"{text} (a BaseException that is not an Exception)"
    return text


@contextlib.contextmanager
def report_stream() -> Iterator[TextIO]:
    """The stream a command writes its report to (with ``--json``, one JSON
    document), while whatever else is written to standard output (``print``,
    ``sys.__stdout__``, ``os.write(1, ...)`` by a plugin or SGLang while they
    load) goes to standard error. Where ``sys.stdout`` is not the process's
    own (a caller captures it), the report goes there and only ``sys.stdout``
    writes are moved."""
    if sys.__stdout__ is None or sys.stdout is not sys.__stdout__:
        report = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            yield report
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no standard output to keep
        with contextlib.redirect_stdout(sys.stderr):
            yield sys.stdout
        return
    report = os.fdopen(os.dup(saved), "w", encoding=sys.__stdout__.encoding, errors=sys.__stdout__.errors)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield report
    finally:
        try:
            report.close()  # flushes it: BrokenPipeError where the reader left
        finally:
            sys.__stdout__.flush()
            os.dup2(saved, 1)
            os.close(saved)


def package_fault(exc: BaseException) -> str:
    """How an error raised outside any plugin's code is reported: a bug of this package."""
    return printable(f"unexpected {type(exc).__name__}: {exc} (a bug in sglang-spec-plugins; please report it)")


class _Running:
    """Plugin code running now, in one place behind one lock (the loader
    enters hundreds of short calls): each call's deadline, and for each thread
    how many calls it is inside, ``os._exit`` raising :class:`OsExitCalled` in
    a thread inside one (other threads end the process as before). One daemon
    thread (started at the first call, again in a forked child) warns about
    each call still running :data:`SLOW_S` seconds after it began."""

    def __init__(self):
        self._lock = threading.Lock()
        self._deadlines: Dict["_PluginCode", float] = {}  # call -> its deadline on time.monotonic()
        self._started = False

    def enter(self, call: "_PluginCode") -> int:
        """Watch ``call`` from now on and refuse ``os._exit`` in this thread,
        until :meth:`leave` with the thread's ident this returns; calls nest."""
        me = threading.get_ident()
        with self._lock:
            if not self._started:  # first: where it cannot start, nothing has changed
                threading.Thread(target=self._warn_when_due, name="sglang-spec-plugins-watch", daemon=True).start()
                self._started = True
            self._deadlines[call] = time.monotonic() + SLOW_S
            _depth[me] = _depth.get(me, 0) + 1
            os._exit = _exit
        return me

    def leave(self, call: "_PluginCode", me: int) -> None:
        with self._lock:
            self._deadlines.pop(call, None)
            _depth[me] -= 1
            if not _depth[me]:
                del _depth[me]
            if not _depth:
                os._exit = _real_exit

    def _warn_when_due(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = sorted((c for c, deadline in self._deadlines.items() if deadline <= now), key=self._deadlines.__getitem__)
                for call in due:
                    del self._deadlines[call]
                wait = min(self._deadlines.values(), default=now + SLOW_S) - now
            for call in due:
                logger.warning("sglang-spec-plugins: %s", call.slow_line())
            if not due:  # a call started later is due later than every one watched now
                time.sleep(wait)


_real_exit = os._exit
_depth: Dict[int, int] = {}  # thread ident -> how many plugin calls it is inside (kept across a fork: the child leaves them)


def _exit(code):
    if threading.get_ident() in _depth:
        raise OsExitCalled(code)
    _real_exit(code)


_running = _Running()
os.register_at_fork(after_in_child=_running.__init__)  # the child has no watching thread, nor a held lock
