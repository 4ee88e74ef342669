"""A short digest that tells whether two processes serve plugins identically.

SGLang runs the loader in every process (each TP/DP/PP rank, on every node).
Ranks must register the same algorithms with the same answers, or their CUDA
graphs and KV layouts disagree. :func:`fingerprint` digests what decides
that: this package's version, the SGLang release, every loaded plugin with
its distribution and version, the plugins.toml settings (not its path), and
the answers known at load (overlap support, verify shape, capabilities,
draft-may-verify). The loader logs it; ``doctor`` and ``check`` print it,
and equal inputs give equal fingerprints in every process. The answers that
depend on ``speculative_num_draft_tokens`` (maximum, widths, widths by batch
size) are resolved later: each is logged and agreed on by the server's
processes as it is resolved (:mod:`.agreement`), and ``check`` compares
them with a fresh process's.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Mapping, Optional

from . import __version__
from .plugins import PluginSet


def fingerprint_data(plugin_set: PluginSet, policies: Mapping[str, Any], sglang_version: Optional[str]) -> Dict[str, Any]:
    """What :func:`fingerprint` digests, as plain data."""
    return {
        "sglang_spec_plugins": __version__,
        "sglang": sglang_version,
        "plugins": [[p.name, p.distribution, p.version] for p in plugin_set.plugins],
        "config": plugin_set.config.as_plain(),
        "algorithms": {
            name: {
                "plugin": plugin_set.algorithms[name].plugin,
                "overlap": plugin_set.algorithms[name].spec.supports_overlap,
                "verify_shape": plugin_set.algorithms[name].spec.verify_shape,
                "capabilities": dict(plugin_set.algorithms[name].spec.capabilities),
                "draft_may_verify": policy.draft_may_verify(),
            }
            for name, policy in sorted(policies.items())
        },
    }


def fingerprint(plugin_set: PluginSet, policies: Mapping[str, Any], sglang_version: Optional[str]) -> str:
    """16 hex digits of SHA-256 over :func:`fingerprint_data`."""
    return digest(fingerprint_data(plugin_set, policies, sglang_version))


def digest(data: Mapping[str, Any]) -> str:
    """:func:`fingerprint` of :func:`fingerprint_data`'s ``data``."""
    text = json.dumps(data, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def as_json(data: Mapping[str, Any]) -> Any:
    """``data`` as the agreement records it (JSON, what ``json.dumps`` cannot write shown by ``repr``)."""
    return json.loads(json.dumps(data, sort_keys=True, default=repr))


def differences(here: Mapping[str, Any], there: Mapping[str, Any], other: str) -> List[str]:
    """What differs between this process's :func:`fingerprint_data` (``here``, as :func:`as_json` gives it)
    and ``other``'s (``there``), one phrase each, plugins first (an install or upgrade while the server's
    processes start shows there)."""
    found = []
    mine = {p[0]: p for p in here.get("plugins", [])}
    theirs = {p[0]: p for p in there.get("plugins", [])}
    for name in sorted(mine.keys() | theirs.keys()):
        if mine.get(name) != theirs.get(name):
            found.append(f"plugin {name!r} is {_loaded(mine.get(name))} in this process but {_loaded(theirs.get(name))} "
                         f"in {other}")
    for key, what in (("sglang_spec_plugins", "sglang-spec-plugins"), ("sglang", "SGLang")):
        if here.get(key) != there.get(key):
            found.append(f"{what} is {here.get(key)} in this process but {there.get(key)} in {other}")
    for key, what in (("config", "plugins.toml"), ("algorithms", "the answers known at load")):
        ours, yours = _flat(here.get(key)), _flat(there.get(key))
        for path in sorted(ours.keys() | yours.keys()):
            if ours.get(path, _UNSET) != yours.get(path, _UNSET):
                found.append(f"{what}: {path} is {_shown(ours.get(path, _UNSET))} in this process but "
                             f"{_shown(yours.get(path, _UNSET))} in {other}")
    return found


_UNSET = object()


def _loaded(plugin: Any) -> str:
    if plugin is None:
        return "not loaded"
    _, distribution, version = plugin
    return f"{distribution}=={version}" if distribution else "loaded (no distribution)"


def _flat(value: Any, path: str = "") -> Dict[str, Any]:
    """A nested mapping as ``{"dotted.path": leaf}``."""
    if not isinstance(value, Mapping):
        return {path: value} if path else {}
    found: Dict[str, Any] = {}
    for key, item in value.items():
        found.update(_flat(item, f"{path}.{key}" if path else str(key)))
    return found


def _shown(value: Any) -> str:
    return "not set" if value is _UNSET else json.dumps(value)
