"""Exceptions raised by sglang-spec-plugins; each message names its source."""

from __future__ import annotations

from typing import Iterable


class SpecPluginError(Exception):
    """Base class for every error this package raises on bad input."""


class ConfigError(SpecPluginError):
    """plugins.toml (or an environment variable standing in for it) is wrong.

    ``problems`` holds one line per problem, each naming the file, table and
    key; ``str()`` joins them.
    """

    def __init__(self, problems: Iterable[str]):
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class PluginError(SpecPluginError):
    """A drafter plugin failed to load, broke the hook contract, or gave an
    answer outside its declared range. ``plugin`` names the plugin."""

    def __init__(self, plugin: str, message: str):
        self.plugin = plugin
        super().__init__(f"plugin {plugin!r}: {message}")


class EngineError(SpecPluginError):
    """The installed SGLang cannot host plugin algorithms (release outside the
    supported range, or a feature the loader needs is missing)."""


class StartupRefused(SystemExit):
    """Raised by the SGLang entry point when loading must stop the server.

    SGLang's ``load_plugins()`` logs and swallows any ``Exception`` a plugin
    raises; deriving from ``SystemExit`` is what makes ``on_error = "fail"``
    actually stop SGLang. ``cause`` is the underlying error.
    """

    def __init__(self, cause: BaseException):
        self.cause = cause
        super().__init__(f"sglang-spec-plugins refused to start: {cause}")
