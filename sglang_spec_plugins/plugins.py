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

import importlib.util
import inspect
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any, Collection, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import pluggy

from . import config as config_mod
from . import hookspecs
from .config import RESERVED_ALGORITHM_NAMES, AlgorithmConfig, Config, valid_algorithm_name
from .errors import ConfigError, PluginError, closest, printable, show, type_name
from .installed import plugin_entry_points
from .plugin_calls import plugin_code

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
ALLOW_ENV = "SGLANG_SPEC_PLUGINS"
"""Environment variable: comma-separated allow-list of plugin names."""


class PluginInfo(NamedTuple):
    """Where a loaded plugin came from."""

    name: str
    distribution: Optional[str]
    version: Optional[str]
    module_file: Optional[str]

    @property
    def dist_label(self) -> Optional[str]:
        """``dist==version`` (:func:`~.errors.printable`), or None for a plugin with no distribution."""
        return printable(f"{self.distribution}=={self.version}") if self.distribution else None

    @property
    def label(self) -> str:
        """``name (dist==version)`` for log lines and messages (:func:`~.errors.printable`)."""
        return printable(f"{self.name} ({self.dist_label})" if self.distribution else self.name)


class OfferedAlgorithm(NamedTuple):
    """An enabled algorithm, its owning plugin (and that plugin's ``dist==version``)
    and its plugins.toml table."""

    spec: hookspecs.AlgorithmSpec
    plugin: str
    config: AlgorithmConfig
    distribution: Optional[str] = None

    @property
    def name(self) -> str:
        return self.config.name

    def code(self, what: str, **how: str):
        """:func:`~.plugin_calls.plugin_code` for the owner's code, ``what``
        naming the call (the algorithm is named before it)."""
        return plugin_code(self.plugin, self.distribution, f"algorithm {self.name}: {what}", **how)


class PluginFailure(NamedTuple):
    """A plugin dropped under ``on_error = "skip"`` (or reported by ``check``)."""

    plugin: str
    message: str


class PluginSet:
    """The outcome of :func:`discover`: the manager, who is loaded, the
    enabled algorithms with their owners, the plugins dropped under
    ``on_error = "skip"`` and notes on plugins.toml tables left inert."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        plugins: Sequence[PluginInfo],
        algorithms: Mapping[str, OfferedAlgorithm],
        failures: Sequence[PluginFailure],
        config: Config,
        notes: Sequence[str] = (),
        offered_by: Mapping[str, Sequence[str]] = MappingProxyType({}),
        shadowed: Mapping[str, str] = MappingProxyType({}),
    ):
        self.pm = pm
        self.plugins = tuple(plugins)
        self._labels = {p.name: p.dist_label for p in self.plugins}  # asked at every call into a plugin
        self.algorithms = MappingProxyType(dict(algorithms))
        self.failures = tuple(failures)
        self.config = config
        self.notes = tuple(notes)
        self.offered_by = MappingProxyType({name: tuple(owners) for name, owners in offered_by.items()})
        """Algorithm name -> every loaded plugin that offers it (the one ``algorithms`` serves it from among them)."""
        self.shadowed = MappingProxyType(dict(shadowed))
        """Plugin name -> what says that other installs of its distribution sit later on ``sys.path``, unused."""

    def info(self, plugin: str) -> PluginInfo:
        return next(p for p in self.plugins if p.name == plugin)

    def error(self, plugin: str, message: str) -> PluginError:
        """A PluginError naming ``plugin`` and the distribution it came from."""
        return PluginError(plugin, message, self.distribution(plugin))

    def distribution(self, plugin: str) -> Optional[str]:
        """``dist==version`` of the distribution ``plugin`` came from, or None."""
        return self._labels.get(plugin)

    def code(self, plugin: str, what: str, **how: str):
        """:func:`~.plugin_calls.plugin_code` for ``plugin``'s code, ``what`` naming the call."""
        return plugin_code(plugin, self.distribution(plugin), what, **how)

    def imported_hook(self, plugin: str, hook: str) -> Optional[Tuple[str, str]]:
        """``(where hook is defined, the plugin's module)`` when a top-level package other than the
        plugin's own defines ``plugin``'s ``hook`` (``"other.plugin.sgl_spec_verify_width (file)"``): a
        hook an import brought into the plugin's module (``from other.plugin import *`` brings every hook
        of ``other.plugin``), which answers for that module's algorithms. None for the plugin's own, or
        one it cannot place."""
        owner = self.pm.get_plugin(plugin)
        mine = getattr(owner, "__name__", None) if inspect.ismodule(owner) else type(owner).__module__
        impl = next((i for i in getattr(self.pm.hook, hook).get_hookimpls() if i.plugin_name == plugin), None)
        function = getattr(impl, "function", None)
        defined = getattr(function, "__module__", None)
        if not isinstance(mine, str) or not isinstance(defined, str) or defined.split(".")[0] == mine.split(".")[0]:
            return None
        code = getattr(inspect.unwrap(function), "__code__", None)
        where = f" ({code.co_filename})" if code is not None else ""
        return f"{defined}.{getattr(function, '__qualname__', hook)}{where}", mine

    def without(self, failure: PluginError) -> "PluginSet":
        """This set minus the plugin ``failure`` blames (all its algorithms and
        hooks), with the failure recorded: what ``on_error = "skip"`` serves."""
        plugin = failure.plugin
        if self.pm.get_plugin(plugin) is not None:
            self.pm.unregister(name=plugin)
        return PluginSet(
            self.pm,
            [p for p in self.plugins if p.name != plugin],
            {n: a for n, a in self.algorithms.items() if a.plugin != plugin},
            self.failures + (PluginFailure(plugin, str(failure)),),
            self.config,
            self.notes,
            {name: [p for p in owners if p != plugin] for name, owners in self.offered_by.items()},
            {name: line for name, line in self.shadowed.items() if name != plugin},
        )

    def answers(self, hook_name: str, exclude: Optional[str] = None, call: Optional[str] = None, **kwargs: Any) -> Dict[str, Any]:
        """Call every implementation of ``hook_name`` and return the answers,
        ``None`` included, keyed by plugin name (a plugin without an
        implementation is absent).

        The policy uses this instead of ``firstresult`` so that an answer can
        be traced to, and blamed on, the plugin that gave it. Each hookimpl
        runs as that plugin's code (:func:`~.plugin_calls.plugin_code`), named
        by ``call`` (default: the hook's name). ``exclude`` names a plugin not to ask.
        """
        found = {}
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            if impl.plugin_name == exclude:
                continue
            with self.code(impl.plugin_name, call or f"hook {hook_name}"):
                answer = impl.function(*[kwargs[arg] for arg in impl.argnames])
            found[impl.plugin_name] = answer
        return found


def discover_configured(
    path: Optional[Path] = None, *, environ: Mapping[str, str] = os.environ, collect: bool = False
) -> PluginSet:
    """Read plugins.toml (``path``, else the one :func:`config.locate` finds)
    and :func:`discover` its plugins; the file's own problems and unknown
    plugin names come in one ConfigError, raised before any plugin is imported."""
    try:
        config = config_mod.load(path, environ=environ)
        problems: Sequence[str] = ()
    except ConfigError as exc:
        if exc.partial is None:
            raise
        config, problems = exc.partial, exc.problems
    return discover(config, environ=environ, collect=collect, config_problems=problems)


def new_manager() -> pluggy.PluginManager:
    """A PluginManager that knows the hook contract."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def discover(
    config: Config,
    *,
    environ: Mapping[str, str] = os.environ,
    collect: bool = False,
    config_problems: Sequence[str] = (),
) -> PluginSet:
    """Load, validate and cross-check the selected plugins.

    ``config_problems`` (problems the parser already found; ``config`` is
    then its partial result) and unknown plugin names in ``[plugins]`` or
    ``$SGLANG_SPEC_PLUGINS`` raise one ConfigError before any plugin is
    imported. Problems found by cross-checking the tables with what the
    loaded plugins offer (unknown algorithm names, an algorithm offered
    twice without a ``plugin`` key) raise one ConfigError after. A plugin that fails
    to import or breaks the contract raises PluginError when
    ``on_error = "fail"``; with ``"skip"`` (or ``collect=True``, used by
    ``check``) it is dropped and listed in ``failures``.
    """
    by_name = _by_name(plugin_entry_points(ENTRY_POINT_GROUP))
    problems = list(config_problems)
    selected = _select(config, sorted(by_name), environ, problems)
    if problems:  # a broken [plugins] table would select the wrong plugins: import none of them
        raise ConfigError(problems)
    tolerate = collect or config.on_error == "skip"
    pm = new_manager()
    infos: List[PluginInfo] = []
    failures: List[PluginFailure] = []
    offered: Dict[str, List[Tuple[str, hookspecs.AlgorithmSpec]]] = {}

    for name in selected:
        try:
            info, specs = _load_one(pm, name, by_name[name])
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

    notes: List[str] = []
    algorithms = _match_algorithms(config, offered, by_name, {i.name: i.dist_label for i in infos}, problems, notes)
    if problems:
        raise ConfigError(problems)
    return PluginSet(pm, infos, algorithms, failures, config, notes,
                     {name: [plugin for plugin, _ in offers] for name, offers in offered.items()},
                     _shadowed({info.name: by_name[info.name][0] for info in infos}))


def _shadowed(loaded: Mapping[str, metadata.EntryPoint]) -> Dict[str, str]:
    """Plugin name -> what says that the distribution it loads from (its entry point's) is installed again
    later on ``sys.path`` (Python reads the first: the others are never imported). One listing of each
    ``sys.path`` folder for every plugin (``importlib.metadata`` would search them once per plugin)."""
    mine = {name: getattr(getattr(ep, "dist", None), "_path", None) for name, ep in loaded.items()}
    wanted = {_dist_of(folder.name) for folder in mine.values() if isinstance(folder, Path)}
    installs: Dict[str, List[Path]] = {}
    for entry in sys.path if wanted else ():
        try:
            names = os.listdir(entry or ".")
        except OSError:  # absent, or a file
            continue
        for found in names:
            if found.endswith((".dist-info", ".egg-info")) and _dist_of(found) in wanted:
                installs.setdefault(_dist_of(found), []).append(Path(entry or ".", found))
    lines = {}
    for name, folder in mine.items():
        if not isinstance(folder, Path):
            continue
        others = [f for f in installs.get(_dist_of(folder.name), []) if f.resolve() != folder.resolve()]
        if others:
            dist_name, version = loaded[name].dist.name, loaded[name].dist.version
            hidden = "; ".join(f"{shadowed.name}=={shadowed.version} at {other.parent}" for other in others
                               for shadowed in [metadata.PathDistribution(other)])
            lines[name] = (f"plugin {name!r} loads {dist_name}=={version} from {folder.parent}, the first on sys.path; "
                           f"it shadows {hidden}, which is never imported (pip install --user, another site-packages "
                           "or PYTHONPATH): uninstall the one not meant to serve")
    return lines


def _dist_of(folder: str) -> str:
    """The distribution a metadata folder's name (``name-version.dist-info``, ``name.egg-info``) is of, as
    packaging compares names (PEP 503)."""
    name = folder.rsplit(".", 1)[0] if folder.endswith(".egg-info") else folder
    return re.sub(r"[-_.]+", "-", name.split("-")[0]).lower()


def _by_name(entry_points: Iterable[metadata.EntryPoint]) -> Dict[str, List[metadata.EntryPoint]]:
    """Entry points grouped by plugin name; the same distribution seen twice
    on ``sys.path`` (same name, version and target) counts once."""
    by_name: Dict[str, List[metadata.EntryPoint]] = {}
    for ep in entry_points:
        same = by_name.setdefault(ep.name, [])
        if not any(_provider(other) == _provider(ep) for other in same):
            same.append(ep)
    return by_name


def _provider(ep: metadata.EntryPoint) -> str:
    """``dist==version (module:attr)`` for messages."""
    dist = getattr(ep, "dist", None)
    return f"{dist.name}=={dist.version} ({ep.value})" if dist else ep.value


def _select(config: Config, installed: Sequence[str], environ: Mapping[str, str], problems: List[str]) -> List[str]:
    for key, names in (("enable", config.enable or ()), ("disable", config.disable)):
        for name in names:
            if name not in installed:
                problems.append(f"{config.origin}: [plugins] {key}: {_unknown(name, installed)}")
    allowed = None
    raw = environ.get(ALLOW_ENV, "")
    if raw:
        allowed = [n.strip() for n in raw.split(",") if n.strip()]
        if not allowed:
            problems.append(f"{ALLOW_ENV}={raw!r} names no plugin; unset it to load every enabled plugin")
        for name in allowed:
            if name not in installed:
                problems.append(f"{ALLOW_ENV}={raw}: {_unknown(name, installed)}")
    chosen = [n for n in installed if (config.enable is None or n in config.enable) and n not in config.disable]
    if allowed is not None:
        chosen = [n for n in chosen if n in allowed]
    return chosen


def _load_one(pm: pluggy.PluginManager, name: str, eps: Sequence[metadata.EntryPoint]):
    if len(eps) > 1:
        raise PluginError(name, "the plugin name is claimed by several installed distributions: "
                          + ", ".join(sorted(map(_provider, eps))) + "; uninstall all but one")
    ep = eps[0]
    dist = getattr(ep, "dist", None)
    found = dist.metadata if dist else {}
    dist_name, dist_version = found.get("Name"), found.get("Version")
    label = f"{dist_name}=={dist_version}" if dist else None
    with plugin_code(name, label, f"importing {ep.value}", failed=f"cannot import {ep.value}:", doing=f"importing {ep.value}"):
        plugin = ep.load()
    _refuse_callable_entry_point(name, ep, plugin, label)
    try:
        pm.register(plugin, name=name)
        _refuse_renamed_hooks(pm, plugin, name, label)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise PluginError(name, f"breaks the hook contract: {detail}", label) from exc
    except ValueError as exc:
        raise PluginError(name, str(exc), label) from exc
    unknown = sorted(caller.name for caller in pm.get_hookcallers(plugin) or () if caller.name not in _HOOK_NAMES)
    if unknown:  # optionalhook=True hides these from check_pending; a misspelt hook would be silently unused
        raise PluginError(name, "breaks the hook contract: " + "; ".join(
            f"unknown hook {hook!r}{_closest(hook, _HOOK_NAMES)}, marked optionalhook=True; every @hookimpl must "
            f"implement one of the {len(_HOOK_NAMES)} hooks of this contract (sglang_spec_plugins.hookspecs)"
            for hook in unknown), label)
    mine = [(hook, impl) for hook in _HOOK_NAMES for impl in getattr(pm.hook, hook).get_hookimpls() if impl.plugin_name == name]
    for hook, impl in mine:
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            raise PluginError(name, f"{hook} is a hook wrapper (wrapper=True or hookwrapper=True); this contract has no "
                              "wrappers: every answer must come from the one plugin that owns the algorithm", label)
        if impl.kwargnames:
            defaults = ", ".join(impl.kwargnames)
            raise PluginError(name, f"{hook} gives {defaults} a default value; pluggy never passes an argument that has a "
                              "default, so the hook would always see the default (e.g. `settings={}` ignores plugins.toml): "
                              "remove the default", label)
    info = PluginInfo(
        name=name,
        distribution=dist_name,
        version=dist_version,
        module_file=getattr(inspect.getmodule(plugin), "__file__", None),
    )
    if not mine:
        raise PluginError(name, f"offers nothing: its entry point {ep.value} is {show(plugin)}, a {type_name(plugin)} "
                          "with no @hookimpl function; it must name a module or an object holding @hookimpl functions, "
                          "sgl_spec_algorithms among them", label)
    specs: List[hookspecs.AlgorithmSpec] = []
    for hook, impl in mine:
        if hook != "sgl_spec_algorithms":
            continue
        with plugin_code(name, label, "sgl_spec_algorithms"):
            result = impl.function()
        specs.extend(_check_specs(name, result, label))
        if not specs:
            raise PluginError(name, f"offers nothing: sgl_spec_algorithms returned {show(result)}; a plugin with no "
                              "algorithm to offer here must be left out ([plugins] disable)", label)
    if not any(hook == "sgl_spec_algorithms" for hook, _ in mine):
        raise PluginError(name, "offers nothing: it does not implement sgl_spec_algorithms, so its other hooks "
                          f"({', '.join(hook for hook, _ in mine)}) answer for no algorithm of its own", label)
    return info, specs


def _refuse_callable_entry_point(name: str, ep: metadata.EntryPoint, plugin: Any, label: Optional[str]) -> None:
    """An entry point names a module, or an object whose attributes are the
    @hookimpl functions; a function or a class there is a mistake pluggy would
    not report (it finds no hookimpls on a function, and a class's methods
    would be called without ``self``)."""
    module = ep.value.partition(":")[0]
    if inspect.isclass(plugin):
        raise PluginError(name, f"the entry point {name} = {ep.value!r} names the class {plugin.__qualname__}; an entry point "
                          f"must name a module ({module!r}) or an object holding @hookimpl functions (an instance, "
                          f"not its class)", label)
    if inspect.isroutine(plugin):
        raise PluginError(name, f"the entry point {name} = {ep.value!r} names the function {plugin.__qualname__}; an "
                          f"entry point must name a module ({module!r}) or an object holding @hookimpl functions", label)


_HOOK_NAMES = tuple(sorted(n for n in vars(hookspecs) if n.startswith("sgl_spec_")))


def _refuse_renamed_hooks(pm: pluggy.PluginManager, plugin: Any, name: str, label: Optional[str]) -> None:
    """A hookimpl under a name the contract renamed (:data:`~.hookspecs.RENAMED_HOOKS`) is refused with the new name."""
    old = sorted(caller.name for caller in pm.get_hookcallers(plugin) or () if caller.name in hookspecs.RENAMED_HOOKS)
    if old:
        raise PluginError(name, "; ".join(f"implements {hook}, which is now {hookspecs.RENAMED_HOOKS[hook]} (same "
                                          "arguments and answers): rename the function" for hook in old), label)


def _unknown(name: str, installed: Collection[str]) -> str:
    """How a plugin name no entry point of the group names is explained: registered in another
    entry-point group (by distribution and group), else unknown, with the closest installed names."""
    elsewhere = []
    for dist in metadata.distributions():  # read only for a name that is not found: every distribution's
        for ep in getattr(dist, "entry_points", ()):
            if ep.name == name and ep.group != ENTRY_POINT_GROUP:
                dist_name, version = dist.name, dist.version
                elsewhere.append(f"{dist_name}=={version} registers it in the group {ep.group!r} ({ep.name} = {ep.value})")
    if elsewhere:
        return (f"plugin {name!r} is not an entry point of the group {ENTRY_POINT_GROUP!r}: "
                f"{'; '.join(sorted(set(elsewhere)))}; a drafter plugin's entry point goes in the group "
                f"{ENTRY_POINT_GROUP} ([project.entry-points.{ENTRY_POINT_GROUP}] in its pyproject.toml; reinstall it after "
                f"the change)")
    return f"unknown plugin {name!r} ({_nearest(name, installed)})"


def _nearest(name: str, installed: Collection[str]) -> str:
    """How an unknown plugin name is explained: the closest installed names
    and how many are installed (``list`` shows the loaded ones)."""
    if not installed:
        return "no plugin is installed"
    near = closest(name, installed, n=3)
    count = f"{len(installed)} installed"
    return f"did you mean {' or '.join(map(repr, near))}? {count}" if near else f"no installed plugin is named alike; {count}"


def _source_names(eps: Sequence[metadata.EntryPoint], algorithm: str) -> Union[bool, str]:
    """Whether the Python source of the top-level package behind ``eps``
    holds ``algorithm`` as a quoted string, any case; where that source
    cannot be found or read, why not. The files are read, never imported (a
    plugin that is not loaded must not run)."""
    quoted = re.compile(r"""(['"])%s\1""" % re.escape(algorithm), re.IGNORECASE)
    for ep in eps:
        top = ep.value.split(":")[0].strip().split(".")[0]
        try:
            spec = importlib.util.find_spec(top)  # a top-level name: finds, imports nothing
        except (ImportError, ValueError) as exc:
            return f"finding its module {top} raised {type(exc).__name__}: {exc}"
        if spec is None:
            return f"no module {top}"
        roots = [Path(p) for p in spec.submodule_search_locations or ()]
        files = [f for root in roots for f in root.rglob("*.py")] if roots else [Path(spec.origin or "")]
        if not files or any(f.suffix != ".py" for f in files):
            return f"its module {top} is not Python source (an extension module, or nothing to read)"
        try:
            if any(quoted.search(f.read_text(encoding="utf-8", errors="replace")) for f in files):
                return True
        except OSError as exc:
            return f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    return False


def _closest(name: str, known: Sequence[str]) -> str:
    """``" (did you mean 'x'?)"`` for the nearest of ``known``, or ``""``."""
    near = closest(name, known)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _check_specs(plugin: str, result: Any, label: Optional[str]) -> List[hookspecs.AlgorithmSpec]:
    def fail(message: str) -> PluginError:
        return PluginError(plugin, message, label)

    if isinstance(result, (str, bytes)) or not isinstance(result, (list, tuple)):
        got = f"a {type(result).__name__} (it is consumed once; return a list)" if inspect.isgenerator(result) else show(result)
        raise fail(f"sgl_spec_algorithms must return a list of AlgorithmSpec, got {got}")
    with plugin_code(plugin, label, f"reading what sgl_spec_algorithms returned (a {type_name(result)})"):
        result = list(result)  # a list or tuple subclass may iterate its own way: read it once, as the plugin's code
    seen = set()
    for spec in result:
        if not isinstance(spec, hookspecs.AlgorithmSpec):
            raise fail(f"sgl_spec_algorithms returned {show(spec)}, not an AlgorithmSpec")
        if not valid_algorithm_name(spec.name):
            raise fail(f"algorithm name {spec.name!r} is not a valid name (ASCII letters, digits and _, starting with a letter)")
        upper = spec.name.upper()
        if upper in RESERVED_ALGORITHM_NAMES:
            raise fail(f"algorithm name {upper!r} is reserved by SGLang for a built-in algorithm")
        if upper in seen:
            raise fail(f"offers algorithm {upper!r} twice")
        if not callable(spec.worker_factory):
            raise fail(f"algorithm {upper}: worker_factory is not callable")
        if spec.validate_server_args is not None and not callable(spec.validate_server_args):
            raise fail(f"algorithm {upper}: validate_server_args is not callable")
        if not isinstance(spec.supports_overlap, bool):
            raise fail(f"algorithm {upper}: supports_overlap must be a bool")
        seen.add(upper)
    return list(result)


def _match_algorithms(
    config: Config,
    offered: Mapping[str, List[Tuple[str, hookspecs.AlgorithmSpec]]],
    by_name: Mapping[str, Sequence[metadata.EntryPoint]],
    loaded: Mapping[str, Optional[str]],
    problems: List[str],
    notes: List[str],
) -> Dict[str, OfferedAlgorithm]:
    """Pair each offered algorithm with its table.

    A table whose ``plugin`` is installed but not loaded (disabled, narrowed
    out by ``SGLANG_SPEC_PLUGINS`` or skipped) is inert: noted, not an error.
    A table without ``plugin`` that no loaded plugin offers is inert when the
    source of an installed plugin that is not loaded names it (read, never
    imported: :func:`_source_names`), and an unknown algorithm otherwise (a
    typo, such as ``[algorithms.SDB]``, must not leave SBD at its defaults),
    also when a not-loaded plugin's source cannot be read: the message says so
    and how to name that plugin."""
    origin = config.origin
    installed = set(by_name)
    not_loaded = sorted(installed - set(loaded))
    for name, table in config.algorithms.items():
        owners = [plugin for plugin, _ in offered.get(name, [])]
        if table.plugin is not None and table.plugin not in installed:
            problems.append(f"{origin}: [algorithms.{name}] plugin: {_unknown(table.plugin, installed)}")
        elif table.plugin is not None and table.plugin not in loaded:
            notes.append(f"{origin}: [algorithms.{name}] is inert: its plugin {table.plugin!r} is not loaded")
        elif table.plugin is not None and table.plugin not in owners:
            problems.append(f"{origin}: [algorithms.{name}] plugin: plugin {table.plugin!r} does not offer {name} (offered by: {', '.join(owners) or 'no enabled plugin'})")
        elif not owners:
            read = {plugin: _source_names(by_name[plugin], name) for plugin in not_loaded}
            maybe = [plugin for plugin, names in read.items() if names is True]
            if maybe:
                notes.append(f"{origin}: [algorithms.{name}] is inert: no loaded plugin offers it; the source of "
                             f"{', '.join(map(repr, maybe))} (installed, not loaded) names it")
                continue
            near = closest(name, offered)
            hint = f" (did you mean {near[0]}, offered by {offered[near[0]][0][0]!r}?)" if near else ""
            unreadable = "".join(f"; the source of {plugin!r} (installed, not loaded) cannot be read ({why}): if {plugin!r} "
                                 f"offers {name}, name it with plugin = \"{plugin}\""
                                 for plugin, why in read.items() if isinstance(why, str))
            unnamed = sum(names is False for names in read.values())
            unread = (f"; nor does the source of the {unnamed} installed plugin(s) not loaded name it (if one of "
                      "them makes the name at run time, name that plugin with plugin = \"...\")") if unnamed else ""
            problems.append(f"{origin}: [algorithms.{name}]: unknown algorithm; no installed plugin offers it"
                            f"{hint}{unreadable}{unread}")
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
        chosen[name] = OfferedAlgorithm(spec=spec, plugin=plugin, config=table, distribution=loaded[plugin])
    return chosen
