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
from dataclasses import dataclass
from importlib import metadata
from typing import FrozenSet, Optional, Tuple

WIDTH_HOOK_NAMES = (
    "get_num_tokens_per_bs_for_target_verify",
    "get_num_tokens_per_req_for_target_verify",
)
"""The names SGLang's runners have called to ask an algorithm for its
TARGET_VERIFY width, oldest first."""


@dataclass(frozen=True)
class EngineProbe:
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
        if missing:
            return (f"SGLang {self.version} lacks " + " and ".join(missing),)
        return ()


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
    plugin_framework = False
    try:
        plugin_framework = importlib.util.find_spec("sglang.srt.plugins") is not None
        spec_info = importlib.import_module("sglang.srt.speculative.spec_info")
        registry = (
            importlib.import_module("sglang.srt.speculative.spec_registry")
            if importlib.util.find_spec("sglang.srt.speculative.spec_registry")
            else None
        )
    except Exception as exc:  # a broken install must show up in doctor, not crash it
        return EngineProbe(version=version, plugin_framework=plugin_framework, import_error=f"{type(exc).__name__}: {exc}")

    enum = spec_info.SpeculativeAlgorithm
    enum_methods = {
        name for name, value in vars(enum).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }
    custom = getattr(registry, "CustomSpecAlgo", None)
    reserved = (
        frozenset(member.name for member in enum)
        | frozenset(getattr(registry, "_RESERVED_NAMES", ()))  # 0.5.12
        | frozenset(getattr(registry, "_RESERVED_ALIASES", ()))  # 0.5.13+
    )
    return EngineProbe(
        version=version,
        plugin_framework=plugin_framework,
        registry=registry is not None and hasattr(registry, "register_algorithm"),
        register_classmethod=callable(getattr(enum, "register", None)),
        width_hooks=tuple(n for n in WIDTH_HOOK_NAMES if n in enum_methods),
        draft_check="supports_target_verify_for_draft" in enum_methods,
        reserved_names=reserved,
        enum_only_methods=tuple(sorted(enum_methods - set(dir(custom)))) if custom else (),
    )
