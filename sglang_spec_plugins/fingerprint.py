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
from typing import Any, Dict, Mapping, Optional

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
    text = json.dumps(fingerprint_data(plugin_set, policies, sglang_version), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
