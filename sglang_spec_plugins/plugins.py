"""Drafter plugin discovery: entry points -> a validated pluggy PluginManager.

A plugin is an entry point in the group ``sglang_spec_plugins``; its name is
the plugin's name everywhere (plugins.toml, the env allow-list, messages).
:func:`discover` loads the selected ones, validates every hookimpl against
:mod:`sglang_spec_plugins.hookspecs`, collects the algorithms they offer and
cross-checks them with plugins.toml. Nothing here imports SGLang.

Selection: plugins.toml ``[plugins] enable`` (absent: all installed) minus
``disable``, then, if ``SGLANG_SPEC_PLUGINS`` is set, only the names it lists
(comma-separated, like SGLang's ``SGLANG_PLUGINS``).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from importlib import metadata
from types import MappingProxyType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import pluggy

from . import hookspecs
from .config import RESERVED_ALGORITHM_NAMES, AlgorithmConfig, Config
from .errors import ConfigError, PluginError

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
ALLOW_ENV = "SGLANG_SPEC_PLUGINS"
"""Environment variable: comma-separated allow-list of plugin names."""


@dataclass(frozen=True)
class PluginInfo:
    """Where a loaded plugin came from."""

    name: str
    distribution: Optional[str]
    version: Optional[str]
    module_file: Optional[str]

    @property
    def label(self) -> str:
        """``name (dist==version)`` for log lines and messages."""
        if self.distribution:
            return f"{self.name} ({self.distribution}=={self.version})"
        return self.name


@dataclass(frozen=True)
class OfferedAlgorithm:
    """An enabled algorithm, its owning plugin and its plugins.toml table."""

    spec: hookspecs.AlgorithmSpec
    plugin: str
    config: AlgorithmConfig

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class PluginFailure:
    """A plugin dropped under ``on_error = "skip"`` (or reported by ``check``)."""

    plugin: str
    message: str


class PluginSet:
    """The outcome of :func:`discover`: the manager, who is loaded, and the
    enabled algorithms with their owners."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        plugins: Sequence[PluginInfo],
        algorithms: Mapping[str, OfferedAlgorithm],
        failures: Sequence[PluginFailure],
        config: Config,
    ):
        self.pm = pm
        self.plugins = tuple(plugins)
        self.algorithms = MappingProxyType(dict(algorithms))
        self.failures = tuple(failures)
        self.config = config

    def info(self, plugin: str) -> PluginInfo:
        return next(p for p in self.plugins if p.name == plugin)

    def answers(self, hook_name: str, **kwargs: Any) -> Dict[str, Any]:
        """Call every implementation of ``hook_name`` and return the non-None
        answers keyed by plugin name.

        The policy uses this instead of ``firstresult`` so that an answer can
        be traced to, and blamed on, the plugin that gave it. An exception in
        a hookimpl becomes a PluginError naming that plugin.
        """
        found = {}
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            try:
                answer = impl.function(*[kwargs[arg] for arg in impl.argnames])
            except Exception as exc:
                raise PluginError(impl.plugin_name, f"hook {hook_name} raised {type(exc).__name__}: {exc}") from exc
            if answer is not None:
                found[impl.plugin_name] = answer
        return found


def new_manager() -> pluggy.PluginManager:
    """A PluginManager that knows the hook contract."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def discover(
    config: Config,
    *,
    environ: Mapping[str, str] = os.environ,
    entry_points: Optional[Iterable[metadata.EntryPoint]] = None,
    collect: bool = False,
) -> PluginSet:
    """Load, validate and cross-check the selected plugins.

    Problems with plugins.toml itself (unknown plugin or algorithm names, an
    algorithm offered twice without a ``plugin`` key) raise ConfigError. A
    plugin that fails to import or breaks the contract raises PluginError when
    ``on_error = "fail"``; with ``"skip"`` (or ``collect=True``, used by
    ``check``) it is dropped and listed in ``failures``.
    """
    if entry_points is None:
        entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    by_name: Dict[str, metadata.EntryPoint] = {}
    for ep in entry_points:
        by_name.setdefault(ep.name, ep)

    selected = _select(config, sorted(by_name), environ)
    tolerate = collect or config.on_error == "skip"
    pm = new_manager()
    infos: List[PluginInfo] = []
    failures: List[PluginFailure] = []
    offered: Dict[str, List[Tuple[str, hookspecs.AlgorithmSpec]]] = {}

    for name in selected:
        ep = by_name[name]
        try:
            info, specs = _load_one(pm, name, ep)
        except PluginError as exc:
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)
            if not tolerate:
                raise
            failures.append(PluginFailure(name, str(exc)))
            continue
        infos.append(info)
        for spec in specs:
            offered.setdefault(spec.name.upper(), []).append((name, spec))

    failed = {f.plugin for f in failures}
    algorithms = _match_algorithms(config, offered, set(by_name), set(selected) - failed, failed)
    return PluginSet(pm, infos, algorithms, failures, config)


def _select(config: Config, installed: Sequence[str], environ: Mapping[str, str]) -> List[str]:
    problems = []
    known = ", ".join(installed) or "none"
    for key, names in (("enable", config.enable or ()), ("disable", config.disable)):
        for name in names:
            if name not in installed:
                problems.append(f"{config.origin}: [plugins] {key}: unknown plugin {name!r} (installed: {known})")
    allowed = None
    raw = environ.get(ALLOW_ENV, "")
    if raw.strip():
        allowed = [n.strip() for n in raw.split(",") if n.strip()]
        for name in allowed:
            if name not in installed:
                problems.append(f"{ALLOW_ENV}={raw}: unknown plugin {name!r} (installed: {known})")
    if problems:
        raise ConfigError(problems)
    chosen = [n for n in installed if (config.enable is None or n in config.enable) and n not in config.disable]
    if allowed is not None:
        chosen = [n for n in chosen if n in allowed]
    return chosen


def _load_one(pm: pluggy.PluginManager, name: str, ep: metadata.EntryPoint):
    dist = getattr(ep, "dist", None)
    try:
        plugin = ep.load()
    except Exception as exc:
        raise PluginError(name, f"cannot import {ep.value}: {type(exc).__name__}: {exc}") from exc
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise PluginError(name, f"breaks the hook contract: {detail}") from exc
    except ValueError as exc:
        raise PluginError(name, str(exc)) from exc
    info = PluginInfo(
        name=name,
        distribution=dist.name if dist else None,
        version=dist.version if dist else None,
        module_file=getattr(inspect.getmodule(plugin), "__file__", None),
    )
    impls = [i for i in pm.hook.sgl_spec_algorithms.get_hookimpls() if i.plugin_name == name]
    specs: List[hookspecs.AlgorithmSpec] = []
    for impl in impls:
        try:
            result = impl.function()
        except Exception as exc:
            raise PluginError(name, f"sgl_spec_algorithms raised {type(exc).__name__}: {exc}") from exc
        specs.extend(_check_specs(name, result))
    return info, specs


def _check_specs(plugin: str, result: Any) -> List[hookspecs.AlgorithmSpec]:
    if isinstance(result, (str, bytes)) or not isinstance(result, (list, tuple)):
        raise PluginError(plugin, f"sgl_spec_algorithms must return a list of AlgorithmSpec, got {result!r}")
    seen = set()
    for spec in result:
        if not isinstance(spec, hookspecs.AlgorithmSpec):
            raise PluginError(plugin, f"sgl_spec_algorithms returned {spec!r}, not an AlgorithmSpec")
        upper = spec.name.upper() if isinstance(spec.name, str) else None
        if not upper or not upper.replace("_", "").isalnum():
            raise PluginError(plugin, f"algorithm name {spec.name!r} is not a valid name (letters, digits, _)")
        if upper in RESERVED_ALGORITHM_NAMES:
            raise PluginError(plugin, f"algorithm name {upper!r} is reserved by SGLang for a built-in algorithm")
        if upper in seen:
            raise PluginError(plugin, f"offers algorithm {upper!r} twice")
        if not callable(spec.worker_factory):
            raise PluginError(plugin, f"algorithm {upper}: worker_factory is not callable")
        if spec.validate_server_args is not None and not callable(spec.validate_server_args):
            raise PluginError(plugin, f"algorithm {upper}: validate_server_args is not callable")
        if not isinstance(spec.supports_overlap, bool):
            raise PluginError(plugin, f"algorithm {upper}: supports_overlap must be a bool")
        seen.add(upper)
    return list(result)


def _match_algorithms(
    config: Config,
    offered: Mapping[str, List[Tuple[str, hookspecs.AlgorithmSpec]]],
    installed: set,
    loaded: set,
    failed: set,
) -> Dict[str, OfferedAlgorithm]:
    problems = []
    origin = config.origin
    for name, table in config.algorithms.items():
        owners = [plugin for plugin, _ in offered.get(name, [])]
        if not owners and failed and (table.plugin is None or table.plugin in failed):
            continue  # its plugin was skipped; that failure is reported already
        if table.plugin is not None and table.plugin not in installed:
            problems.append(f"{origin}: [algorithms.{name}] plugin: unknown plugin {table.plugin!r}")
        elif table.plugin is not None and table.plugin not in loaded:
            problems.append(f"{origin}: [algorithms.{name}] plugin: plugin {table.plugin!r} is not enabled")
        elif table.plugin is not None and table.plugin not in owners:
            problems.append(f"{origin}: [algorithms.{name}] plugin: plugin {table.plugin!r} does not offer {name} (offered by: {', '.join(owners) or 'no enabled plugin'})")
        elif not owners:
            problems.append(f"{origin}: [algorithms.{name}]: unknown algorithm; no enabled plugin offers it")
    chosen: Dict[str, OfferedAlgorithm] = {}
    for name, candidates in sorted(offered.items()):
        table = config.algorithm(name)
        if not table.enabled:
            continue
        if table.plugin is not None:
            candidates = [(p, s) for p, s in candidates if p == table.plugin]
            if not candidates:
                continue  # reported above
        if len(candidates) > 1:
            owners = ", ".join(p for p, _ in candidates)
            problems.append(f"{origin}: [algorithms.{name}] plugin: algorithm {name} is offered by several plugins ({owners}); set plugin = \"<one of them>\"")
            continue
        plugin, spec = candidates[0]
        chosen[name] = OfferedAlgorithm(spec=spec, plugin=plugin, config=table)
    if problems:
        raise ConfigError(problems)
    return chosen
