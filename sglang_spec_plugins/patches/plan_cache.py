"""Every patch's plan, kept between processes.

A plan (:mod:`.unit`) is read off the installed SGLang's source: the method
each patch targets and the few others its condition reads. The same files
and the same patches give the same plans, so :func:`planned` keeps them with
:func:`..engine.source_cache.cached_reading`, keyed by the release, the
patches (names, targets, edits) and the source of the modules that define
and plan them, and checked against every file planning read or looked for.
A plan is stored as its verdict, its reason and its steps: which of the
patch's alternatives, and each edit's fields (a patch may make its edits
from the source it plans on, ``draft_model``), rebuilt from the patches.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Sequence

from ..engine import probe, source_text
from ..engine.source_cache import cached_reading
from .source_edit import Edit
from .unit import MethodPatch, Plan, Verdict, plan_all


def planned(patches: Sequence[MethodPatch], release: Optional[str]) -> Dict[str, Plan]:
    """:func:`.unit.plan_all`'s plans, made in this process or by an earlier one from the same files."""
    reader = [sys.modules[name] for name in sorted(n for n in sys.modules if n.startswith(f"{__package__}."))] + [probe, source_text]
    key = [release, [[p.name, repr(p.alternatives), repr(getattr(p, "edits", ()))] for p in patches]]
    return cached_reading("patch-plans", key, reader, lambda: plan_all(patches, release),
                          lambda plans: _encode(patches, plans), lambda data: _decode(patches, data))


def _encode(patches: Sequence[MethodPatch], plans: Dict[str, Plan]) -> Dict[str, Any]:
    encoded = {}
    for patch in patches:
        plan = plans[patch.name]
        steps = [[patch.alternatives.index(target), None if payload is None else [_edit_fields(e) for e in payload]]
                 for target, payload in plan.steps]
        encoded[patch.name] = [str(plan.verdict), plan.reason, steps]
    return encoded


def _decode(patches: Sequence[MethodPatch], data: Dict[str, Any]) -> Dict[str, Plan]:
    if list(data) != [patch.name for patch in patches]:
        raise ValueError("the entry holds other patches")
    plans = {}
    for patch in patches:
        verdict, reason, steps = data[patch.name]
        plans[patch.name] = Plan(Verdict(verdict), reason, tuple(
            (patch.alternatives[target], None if edits is None else tuple(
                Edit(old, new, tuple(markers), why, every) for old, new, markers, why, every in edits))
            for target, edits in steps))
    return plans


def _edit_fields(edit: Edit) -> list:
    if not isinstance(edit, Edit):
        raise ValueError(f"a plan step holds {type(edit).__name__}, not a source Edit")
    return [edit.old, edit.new, list(edit.fixed_markers), edit.why, edit.every]
