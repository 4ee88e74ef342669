"""Exceptions raised by sglang-spec-plugins (each message names its source),
and how those messages judge and name the values they quote."""

from __future__ import annotations

import difflib
from typing import Any, Collection, Iterable, List, Optional


BEFORE_WEIGHTS = " (found while SGLang resolved its server arguments, before loading any weights)"
"""How a start-up refusal says when it came (:mod:`~.serving.startup_check`, and the draft checkpoint's
check before SGLang reads it: :mod:`~.patches.draft_model`)."""


class SpecPluginError(Exception):
    """Base class for every error this package raises on bad input."""


class ConfigError(SpecPluginError):
    """plugins.toml (or an environment variable standing in for it) is wrong.

    ``problems`` holds one line per problem, each naming the file, table and
    key; ``str()`` joins them. ``partial`` is the config built from the parts
    that were valid (None when the file could not be read at all), so that
    callers can cross-check the rest and report every problem at once.
    """

    def __init__(self, problems: Iterable[str], partial: Any = None):
        self.problems = tuple(problems)
        self.partial = partial
        super().__init__("\n".join(self.problems))


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
        self.detail = message
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
        super().__init__(f"{plugin_origin(plugin, distribution)}: {message}")


def plugin_origin(plugin: str, distribution: Optional[str]) -> str:
    """How messages name a plugin: ``plugin 'sbd' (sglang-spec-example-sbd==0.1.0)``."""
    return f"plugin {plugin!r}" + (f" ({distribution})" if distribution else "")


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
    """``repr(value)`` of something a plugin returned, or a placeholder when its ``__repr__`` raises."""
    try:
        return repr(value)
    except Exception:
        return f"<{type_name(value)} object>"
