"""Algorithm capabilities a drafter may declare, beyond the verify width.

SGLang asks every algorithm object a growing set of yes/no questions; a
plugin algorithm gets ``CustomSpecAlgo``'s conservative default for each
unless its :class:`~sglang_spec_plugins.hookspecs.AlgorithmSpec` declares
the answer in ``capabilities``. Each entry below is one such question: the
release that first asks it, SGLang's default, and what SGLang does with it.
A declared capability the installed release does not ask is logged at load
(DEBUG) and has no effect. Nothing here imports SGLang.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, NamedTuple


class Capability(NamedTuple):
    since: str
    """The first SGLang release that asks it."""
    default: bool
    """SGLang's answer for a plugin algorithm that declares nothing."""
    meaning: str
    """What SGLang does with the answer (docs/reference/capabilities.md shows it)."""


CAPABILITIES: Mapping[str, Capability] = MappingProxyType({
    "has_draft_kv": Capability(
        "0.5.14", True,
        "the drafter keeps a KV cache of its own; False lets SGLang size the KV reserve without draft pages"),
    "supports_grammar_overlap": Capability(
        "0.5.17", False,
        "the worker advances the grammar state machine inside verify, so grammar-constrained requests keep "
        "the overlap schedule"),
    "supports_mixed_chunk": Capability(
        "0.5.19", False,
        "the worker handles batches that mix prefill chunks with decoding (--enable-mixed-chunk is otherwise "
        "refused)"),
    "supports_prefill_shared_read_done": Capability(
        "0.5.21", False,
        "no speculative reader of the shared prefill buffer follows the target's extend, so SGLang may signal "
        "it read early"),
})
"""Every capability a drafter may declare, by the method name SGLang calls.

Not offered, on purpose: ``supports_ragged_verify`` (0.5.16+; this package's
backend patches and start-up gate lay out uniform verify batches only),
``build_disagg_draft_input`` (prefill/decode disaggregation, not examined)
and adaptive speculation (``SpecRuntimeState`` / ``AdaptiveController``, not
examined); width, draft-may-verify, the maximum width, overlap support and
server-argument checks have their own hooks and ``AlgorithmSpec`` fields."""


def check_capabilities(declared: Any) -> Mapping[str, bool]:
    """``declared`` as a read-only mapping; ValueError naming what is wrong."""
    if not hasattr(declared, "items"):
        raise ValueError(f"capabilities must be a mapping of capability name to bool, got {declared!r}")
    for name, value in declared.items():
        if name not in CAPABILITIES:
            raise ValueError(f"unknown capability {name!r} (known: {', '.join(CAPABILITIES)})")
        if not isinstance(value, bool):
            raise ValueError(f"capability {name} must be True or False, got {value!r}")
    return MappingProxyType(dict(declared))
