"""Exceptions raised by sglang-spec-plugins (each message names its source),
and how those messages judge and name the values they quote."""

from __future__ import annotations

import difflib
import os
from typing import Any, Collection, Iterable, List, Optional


BEFORE_WEIGHTS = " (found while SGLang resolved its server arguments, before loading any weights)"
"""How a start-up refusal says when it came (:mod:`~.serving.startup_check`, and the draft checkpoint's
check before SGLang reads it: :mod:`~.patches.draft_model`)."""


class SpecPluginError(Exception):
    """Base class for every error this package raises on bad input: its
    message is its ``lines``, each :func:`printable` (a name from a file, a
    plugin or a distribution cannot add a line, nor drive a terminal)."""

    def __init__(self, *lines: str):
        super().__init__("\n".join(map(printable, lines)))


class ConfigError(SpecPluginError):
    """plugins.toml (or an environment variable standing in for it) is wrong.

    ``problems`` holds one line per problem, each naming the file, table and
    key; ``str()`` joins them. ``partial`` is the config built from the parts
    that were valid (None when the file could not be read at all), so that
    callers can cross-check the rest and report every problem at once.
    """

    def __init__(self, problems: Iterable[str], partial: Any = None):
        self.problems = tuple(map(printable, problems))
        self.partial = partial
        super().__init__(*self.problems)


class PluginError(SpecPluginError):
    """A drafter plugin failed to load, broke the hook contract, or gave an
    answer outside its declared range.

    ``plugin`` names the plugin (its entry-point name); ``distribution`` is
    ``name==version`` of the installed distribution that provides it, when
    known. Both appear in the message.
    """

    def __init__(self, plugin: str, message: str, distribution: Optional[str] = None):
        self.plugin = plugin
        self.distribution = distribution
        self.detail = printable(message)
        """The message without the plugin's name."""
        super().__init__(f"{plugin_origin(plugin, distribution)}: {message}")


class PluginInterrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` while a plugin's code ran (the operator's Ctrl-C,
    or the plugin raised it): not a fault to skip or collect, it stops the run,
    and ``str()`` names the plugin, its distribution and the call interrupted
    (see :mod:`.plugin_calls`)."""

    def __init__(self, plugin: str, message: str, distribution: Optional[str] = None):
        self.plugin = plugin
        self.distribution = distribution
        super().__init__(printable(f"{plugin_origin(plugin, distribution)}: {message}"))


def plugin_origin(plugin: str, distribution: Optional[str]) -> str:
    """How messages name a plugin: ``plugin 'sbd' (sglang-spec-example-sbd==0.1.0)``."""
    return f"plugin {plugin!r}" + (f" ({printable(distribution)})" if distribution else "")


class EngineError(SpecPluginError):
    """The installed SGLang cannot host plugin algorithms (release outside the
    supported range, or a feature the loader needs is missing)."""


class StartupRefused(SystemExit):
    """Raised by the SGLang entry point when loading must stop the server.

    SGLang's ``load_plugins()`` logs and swallows any ``Exception`` a plugin
    raises; deriving from ``SystemExit`` is what makes ``on_error = "fail"``
    actually stop SGLang. ``cause`` is the underlying error; a
    ``KeyboardInterrupt`` cause (:class:`PluginInterrupted`) exits with status
    130, as an interrupted program does, after the raiser has logged it.
    """

    def __init__(self, cause: BaseException):
        self.cause = cause
        super().__init__(130 if isinstance(cause, KeyboardInterrupt) else f"sglang-spec-plugins refused to start: {cause}")


def is_plain_int(value: Any) -> bool:
    """Exactly an ``int``: no bool, no subclass, no numpy scalar. What a plugin
    or plugins.toml gives as a width or a size is judged by this, never by
    the value's own comparison methods."""
    return type(value) is int


def closest(name: str, known: Collection[str], n: int = 1, cutoff: float = 0.6) -> List[str]:
    """The ``n`` names of ``known`` nearest to ``name`` ("did you mean ...?")."""
    return difflib.get_close_matches(name, sorted(known), n=n, cutoff=cutoff)


def type_name(value: Any) -> str:
    """How a message names ``value``'s type: ``float``, ``numpy.ndarray``."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def show(value: Any) -> str:
    """``repr(value)`` of something a plugin returned (:func:`printable`: a ``__repr__`` of its own may
    return anything), or a placeholder when its ``__repr__`` raises."""
    try:
        return printable(repr(value))
    except Exception:
        return f"<{type_name(value)} object>"


def printable(text: Any) -> str:
    """``str(text)`` as every message and log line shows a name, a path or a text
    that comes from a file, a plugin or a distribution: each character that is
    not printable (a newline, a tab, an ANSI escape) escaped as ``repr``
    escapes it (``\\n``, ``\\x1b``), so that none can forge a log line or
    drive a terminal."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown_path(path: Any) -> str:
    """How messages name the file or folder at ``path``: as given and, where a
    symbolic link on the way leads elsewhere, the one actually read
    (``plugins.toml (-> /etc/sglang/real.toml)``); :func:`printable`."""
    given = os.fspath(path)
    real = os.path.realpath(given)
    return printable(given if real == os.path.abspath(given) else f"{given} (-> {real})")
