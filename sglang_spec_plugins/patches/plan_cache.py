"""Every patch's plan, kept between processes.

A plan (:mod:`.unit`) is read off the installed SGLang's source: the method
each patch targets and the few others its condition reads. The same files
and the same patches give the same plans, so :func:`planned` keeps them with
:func:`..engine.source_cache.cached_reading`, keyed by the release and every
source file of this package (which define the patches and plan them; each by
size and modification time, as Python's bytecode cache judges a source), and
checked against every SGLang file planning read or looked for. A plan is
stored as its verdict, its reason, its steps (each target and edit, a patch
may make its edits from the source it plans on: ``draft_model``) and the
module defining its patch, so that a hit imports no patch module
(:mod:`.deferred` imports each when its target is imported).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from ..engine.source_cache import cached_reading, python_files
from .source_edit import Edit
from .unit import Plan, Target, Verdict

PACKAGE = Path(__file__).resolve().parent.parent
"""This package's folder: its source files are part of the key."""


def planned(release: Optional[str]) -> Dict[str, Plan]:
    """Every patch's plan (``PATCHES``, in order, each with its ``owner``),
    made in this process or by an earlier one from the same files."""
    key = [release, [[rel, size, mtime] for rel, _, size, mtime in python_files(PACKAGE)]]
    return cached_reading("patch-plans", key, (), lambda: _plan_every(release), _encode, _decode)


def _plan_every(release: Optional[str]) -> Dict[str, Plan]:
    from .catalogue import OWNERS, PATCHES
    from .unit import plan_all

    return {name: plan.with_owner(OWNERS.get(name)) for name, plan in plan_all(PATCHES, release).items()}


def _encode(plans: Dict[str, Plan]) -> Dict[str, Any]:
    return {name: [str(plan.verdict), plan.reason, plan.owner,
                   [[target.module, target.qualname, None if payload is None else [_edit_fields(e) for e in payload]]
                    for target, payload in plan.steps]]
            for name, plan in plans.items()}


def _decode(data: Dict[str, Any]) -> Dict[str, Plan]:
    plans = {}
    for name, (verdict, reason, owner, steps) in data.items():
        plans[name] = Plan(Verdict(verdict), reason, tuple(
            (Target(module, qualname), None if edits is None else tuple(
                Edit(old, new, tuple(markers), why, every) for old, new, markers, why, every in edits))
            for module, qualname, edits in steps), owner)
    return plans


def _edit_fields(edit: Edit) -> list:
    if not isinstance(edit, Edit):
        raise ValueError(f"a plan step holds {type(edit).__name__}, not a source Edit")
    return [edit.old, edit.new, list(edit.fixed_markers), edit.why, edit.every]
