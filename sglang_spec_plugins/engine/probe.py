"""What the installed SGLang offers, detected by feature.

:func:`probe` imports SGLang's speculative modules (which pulls in torch) and
records what exists; the loader, the patches and ``doctor`` all read the one
immutable :class:`EngineProbe` it returns. Versions are only reported; every
decision is made on the features found.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from importlib import metadata
from pathlib import Path
from typing import FrozenSet, NamedTuple, Optional, Tuple

WIDTH_HOOK_NAMES = (
    "get_num_tokens_per_bs_for_target_verify",
    "get_num_tokens_per_req_for_target_verify",
)
"""The names SGLang's runners have called to ask an algorithm for its
TARGET_VERIFY width, oldest first."""

FIRST_SUPPORTED = "0.5.12"
"""The first release with a plugin algorithm registry."""

GRAPH_RUNNER_LOCATIONS = (
    ("sglang.srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner.__init__"),  # 0.5.14+
    ("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner.__init__"),  # up to 0.5.13
)
"""Where the decode CUDA-graph runner decides its capture width, newest first."""

DUMMY_RUN_LOCATIONS = (
    ("sglang.srt.model_executor.runner.base_runner", "BaseRunner._dummy_run"),  # 0.5.14+
    ("sglang.srt.model_executor.model_runner", "ModelRunner._dummy_run"),  # up to 0.5.13
)
"""Where the dummy (warm-up) forward decides its width, newest first."""


class EngineProbe(NamedTuple):
    """The installed SGLang, as the loader sees it.

    ``version`` is None when SGLang is not installed (then every feature is
    False/empty). ``width_hooks`` lists which of :data:`WIDTH_HOOK_NAMES` the
    built-in algorithm enum defines; ``enum_only_methods`` the public methods
    of that enum a stock ``CustomSpecAlgo`` lacks (SGLang calls them on any
    algorithm object, so plugin algorithms must carry them).
    """

    version: Optional[str]
    plugin_framework: bool = False
    registry: bool = False
    register_classmethod: bool = False
    width_hooks: Tuple[str, ...] = ()
    draft_check: bool = False
    reserved_names: FrozenSet[str] = frozenset()
    enum_only_methods: Tuple[str, ...] = ()
    graph_runner: Optional[str] = None
    dummy_run: Optional[str] = None
    import_error: Optional[str] = None

    @property
    def installed(self) -> bool:
        return self.version is not None

    def problems(self) -> Tuple[str, ...]:
        """Why plugin algorithms cannot be hosted here (empty: they can)."""
        if not self.installed:
            return ("SGLang is not installed",)
        if self.import_error:
            return (f"SGLang {self.version}: importing its speculative modules failed: {self.import_error}",)
        missing = []
        if not self.plugin_framework:
            missing.append("the general-plugin framework sglang.srt.plugins (SGLang 0.5.11+)")
        if not self.registry:
            missing.append("the algorithm registry sglang.srt.speculative.spec_registry (SGLang 0.5.12+)")
        if self.registry and not self.graph_runner:
            missing.append("a decode CUDA-graph runner at a known place")
        if self.registry and not self.dummy_run:
            missing.append("a dummy run at a known place")
        if missing:
            older = _older_than_supported(self.version)
            return (f"SGLang {self.version}{older} lacks " + " and ".join(missing),)
        return ()


def _older_than_supported(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return f" (older than {FIRST_SUPPORTED})" if Version(version) < Version(FIRST_SUPPORTED) else ""
    except InvalidVersion:
        return ""


def resolve_method(module_name: str, qualname: str):
    """``(class, attribute, function)`` for ``module:Class.method`` defined on
    that class itself, ``(module, name, function)`` for a top-level function
    ``module:name`` (imports the module), or None when it is absent."""
    if method_source(module_name, qualname) is None:
        return None
    return member_of(importlib.import_module(module_name), qualname)  # a broken import raises, it is not "absent"


def member_of(module, qualname: str):
    """:func:`resolve_method` in the imported ``module``, its source unread."""
    owner_name, _, attr = qualname.rpartition(".")
    if not owner_name:
        func = getattr(module, attr, None)
        return (module, attr, func) if inspect.isfunction(func) else None
    owner = getattr(module, owner_name, None)
    func = vars(owner).get(attr) if isinstance(owner, type) else None
    return None if func is None else (owner, attr, func)


def method_source(module_name: str, qualname: str) -> Optional[str]:
    """The source of ``module:Class.method`` (or of the top-level function
    ``module:name``) read from the installed file, without importing anything
    (SGLang's runner packages take seconds to import, and most processes never
    need them); None when absent. Only top-level classes and their directly
    defined methods, and top-level functions, are found. The text is read once
    per process (:func:`source_in`); every call counts the file as read by the
    :func:`.source_text.recording` blocks open (a cache entry's key must name it
    whether this process read it before the block or not)."""
    path = source_file(module_name)
    return None if path is None else source_in(path, qualname)


@functools.lru_cache(maxsize=None)
def source_in(path: Path, qualname: str) -> Optional[str]:
    """:func:`method_source` in the file at ``path`` (cached per process)."""
    from .source_text import function_in_file, method_in_file  # not at import: kept plans read no source

    return method_in_file(path, qualname) if "." in qualname else function_in_file(path, qualname)


def source_file(module_name: str) -> Optional[Path]:
    """The installed ``.py`` file of an SGLang module, found without importing
    anything; None when absent."""
    from .source_text import note

    root = importlib.util.find_spec("sglang")
    if root is None or not module_name.startswith("sglang."):
        return None
    parts = module_name.split(".")[1:]
    for base in root.submodule_search_locations or ():
        path = Path(base, *parts).with_suffix(".py")
        note(path)
        if path.is_file():
            return path
    return None


def _exists(module_name: str) -> bool:
    """Whether the module is part of the installed SGLang (imports its parents only)."""
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError as exc:  # a parent package is absent
        if exc.name and module_name.startswith(exc.name):
            return False
        raise


def locate(locations) -> Optional[str]:
    """``module:Class.method`` of the first of ``locations`` present, or None."""
    return next((f"{m}:{q}" for m, q in locations if method_source(m, q) is not None), None)


def _runner_locations() -> Tuple[Optional[str], Optional[str]]:
    """:func:`locate` of :data:`GRAPH_RUNNER_LOCATIONS` and of :data:`DUMMY_RUN_LOCATIONS`,
    kept between processes (:func:`.source_cache.cached_reading`: keyed by SGLang's
    folders and this module's and the cutting module's files, checked against the
    files read and looked for)."""
    from ..cache_entries import file_stamp
    from .source_cache import cached_reading

    folders = list(importlib.util.find_spec("sglang").submodule_search_locations or ())
    cutter = str(Path(__file__).with_name("source_text.py"))  # judged by its file: a hit does not import it
    return cached_reading("runner-locations", [folders, cutter, *file_stamp(cutter)], [sys.modules[__name__]],
                          lambda: (locate(GRAPH_RUNNER_LOCATIONS), locate(DUMMY_RUN_LOCATIONS)), list, _locations)


def _locations(data) -> Tuple[Optional[str], Optional[str]]:
    if not (isinstance(data, list) and len(data) == 2 and all(d is None or isinstance(d, str) for d in data)):
        raise ValueError(f"not two locations: {data!r}")
    return data[0], data[1]


def installed_version() -> Optional[str]:
    """The installed SGLang release, read from its metadata without importing it."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def probe() -> EngineProbe:
    """Probe the SGLang importable in this process (cached per process)."""
    version = installed_version()
    if version is None or importlib.util.find_spec("sglang") is None:
        return EngineProbe(version=None)
    try:
        plugin_framework = _exists("sglang.srt.plugins")
        if not (plugin_framework and _exists("sglang.srt.speculative.spec_registry")):
            return EngineProbe(version=version, plugin_framework=plugin_framework)  # too old: import nothing
        spec_info = importlib.import_module("sglang.srt.speculative.spec_info")
        registry = importlib.import_module("sglang.srt.speculative.spec_registry")
        graph_runner, dummy_run = _runner_locations()
    except Exception as exc:  # a broken install must show up in doctor, not crash it
        return EngineProbe(version=version, import_error=f"{type(exc).__name__}: {exc}")

    enum = spec_info.SpeculativeAlgorithm
    enum_methods = {
        name for name, value in vars(enum).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }
    custom = registry.CustomSpecAlgo
    reserved = (
        frozenset(member.name for member in enum)
        | frozenset(getattr(registry, "_RESERVED_NAMES", ()))  # 0.5.12
        | frozenset(getattr(registry, "_RESERVED_ALIASES", ()))  # 0.5.13+
    )
    return EngineProbe(
        version=version,
        plugin_framework=plugin_framework,
        registry=hasattr(registry, "register_algorithm"),
        register_classmethod=callable(getattr(enum, "register", None)),
        width_hooks=tuple(n for n in WIDTH_HOOK_NAMES if n in enum_methods),
        draft_check="supports_target_verify_for_draft" in enum_methods,
        reserved_names=reserved,
        enum_only_methods=tuple(sorted(enum_methods - set(dir(custom)))),
        graph_runner=graph_runner,
        dummy_run=dummy_run,
    )
