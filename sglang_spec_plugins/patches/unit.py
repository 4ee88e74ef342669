"""Patch units: declared targets, a feature condition, apply() and revert().

A :class:`FunctionPatch` edits lines of an SGLang method (see
:mod:`.source_edit`); a :class:`WrapPatch` wraps one. Before touching anything it *plans*: it reads the
target function's source from the installed file (importing nothing) and
classifies every edit against it. The plan's :class:`Verdict` is

* ``APPLY``: some edit is needed and every edit is either needed or fixed;
* ``NOT_NEEDED``: every edit finds upstream already correct;
* ``REFUSED``: a target is missing or has an unknown shape; the reason
  names the target and the SGLang release.

:func:`apply_all` applies a list of patches all-or-nothing: if one raises,
those applied by the same call are reverted. Applying an applied patch is a
no-op; revert restores the original functions and removes injected names.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..engine.probe import member_of, method_source, resolve_method
from ..errors import EngineError
from . import deferred, on_import
from .source_edit import Edit, rebuild


class Verdict(str, Enum):
    """What a patch plan says to do on the installed release (compares equal
    to, and prints as, its value)."""

    APPLY = "apply"
    NOT_NEEDED = "not needed"
    REFUSED = "refused"

    def __str__(self) -> str:
        return self.value


class Target(NamedTuple):
    """``module:Class.method``, or ``module:function`` for a top-level function."""

    module: str
    qualname: str

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"

    def resolve(self) -> Optional[Tuple[type, str, Any]]:
        """(owner class, attribute name, function), importing the module; None if absent."""
        return resolve_method(self.module, self.qualname)

    def source(self) -> Optional[str]:
        """The method's source, read without importing; None if absent."""
        return method_source(self.module, self.qualname)


@dataclass(frozen=True)
class Plan:
    """A patch's plan: its verdict, why, and the steps ``apply`` takes (each
    target with its payload: a function patch's edits, None for a wrapper).
    Equal when verdict, reason and steps are (``owner`` is not compared)."""

    verdict: Verdict
    reason: str
    steps: Tuple[Tuple[Target, Any], ...] = ()
    owner: Optional[str] = field(default=None, compare=False)
    """The module of this package defining the patch (set by :mod:`.plan_cache`;
    :mod:`.deferred` imports it when the target is imported)."""

    def with_owner(self, owner: Optional[str]) -> "Plan":
        """This plan, defined by the module ``owner``."""
        return replace(self, owner=owner)


class MethodPatch:
    """Replaces one SGLang method (or top-level function); subclasses say when and with what.

    ``alternatives`` lists, in order, where the method lives across releases:
    the first present target is the one assessed and patched (e.g. the graph
    runner moved files in 0.5.14). ``injected`` names are put into the
    method's module globals while the patch is applied (the new code calls them).
    A patch is its own identity (``==`` is ``is``).
    """

    in_place = False
    """A top-level function's replacement goes in as its code (every copy an
    ``from ... import`` made runs it), not as the module's attribute (which
    only callers reading the module's globals see)."""

    def __init__(self, name: str, summary: str, alternatives: Tuple[Target, ...], *,
                 injected: Optional[Dict[str, Callable]] = None):
        self.name = name
        self.summary = summary
        self.alternatives = alternatives
        self.injected: Dict[str, Callable] = {} if injected is None else injected
        self._originals: List[Tuple[Any, str, Any, Dict[str, Any], Any]] = []
        self._waiting: List[Tuple[str, Callable]] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, summary={self.summary!r}, alternatives={self.alternatives!r})"

    @property
    def applied(self) -> bool:
        """Replaced now, or waiting for its module's first import to replace it
        (here, or planned in :mod:`.deferred`)."""
        return bool(self._originals or self._waiting) or deferred.waiting(self.name)

    def plan(self, release: Optional[str]) -> Plan:
        found = next(((t, src) for t in self.alternatives for src in [t.source()] if src is not None), None)
        if found is None:
            where = " or ".join(map(str, self.alternatives))
            return Plan(Verdict.REFUSED, f"SGLang {release}: {where} not found")
        return self.assess(found[0], found[1], release)

    def assess(self, target: Target, source: str, release: Optional[str]) -> Plan:
        """The plan for ``target`` given its source text."""
        raise NotImplementedError

    def replacement(self, func: Any, owner: type, payload: Any) -> Any:
        """The function to install instead of ``func`` (``payload`` from the plan)."""
        raise NotImplementedError

    def apply(self, release: Optional[str], plan: Optional[Plan] = None) -> Plan:
        """Apply if the plan says so; return the plan. Raises EngineError if refused.

        A target whose module is not imported yet is patched right after its
        first import (see :mod:`.on_import`), so applying imports nothing.
        """
        plan = plan or self.plan(release)
        if self.applied or plan.verdict == Verdict.NOT_NEEDED:
            return plan
        if plan.verdict == Verdict.REFUSED:
            raise EngineError(f"patch {self.name}: {plan.reason}")
        try:
            self._install(plan, release)
        except BaseException:
            self.revert()  # the targets installed before the failing one
            raise
        return plan

    def _install(self, plan: Plan, release: Optional[str]) -> None:
        for target, payload in plan.steps:
            def install(module, target=target, payload=payload):
                found = member_of(module, target.qualname)  # the plan read its source: present
                if found is None:
                    raise EngineError(f"patch {self.name}: SGLang {release}: {target} is not in its imported module")
                owner, attr, func = found
                try:
                    new = self.replacement(func, owner, payload)
                except ValueError as exc:
                    raise EngineError(f"patch {self.name}: SGLang {release}: {exc}") from exc
                saved = {k: func.__globals__[k] for k in self.injected if k in func.__globals__}
                func.__globals__.update(self.injected)
                if self.in_place and isinstance(owner, types.ModuleType):  # a top-level function: its code, in place
                    if new.__code__.co_freevars != func.__code__.co_freevars:
                        raise EngineError(f"patch {self.name}: SGLang {release}: {target} cannot take new code in place")
                    self._originals.append((owner, attr, func, saved, func.__code__))
                    func.__code__ = new.__code__
                else:
                    setattr(owner, attr, new)
                    self._originals.append((owner, attr, func, saved, None))
                self._waiting.remove((target.module, install))

            self._waiting.append((target.module, install))
            on_import.after_import(target.module, install)

    def revert(self) -> None:
        """Restore every function this patch replaced, and the module globals;
        forget replacements still waiting for an import."""
        deferred.cancel(self.name)
        while self._waiting:
            module_name, install = self._waiting.pop()
            on_import.cancel(module_name, install)
        while self._originals:
            owner, attr, func, saved, code = self._originals.pop()
            if code is not None:
                func.__code__ = code
            else:
                setattr(owner, attr, func)
            for key in self.injected:
                func.__globals__.pop(key, None)
            func.__globals__.update(saved)


class FunctionPatch(MethodPatch):
    """Line edits to one SGLang method or top-level function (see :mod:`.source_edit`)."""

    in_place = True

    def __init__(self, name: str, summary: str, alternatives: Tuple[Target, ...], edits: Tuple[Edit, ...] = (), *,
                 injected: Optional[Dict[str, Callable]] = None):
        super().__init__(name, summary, alternatives, injected=injected)
        self.edits = edits

    def assess(self, target: Target, source: str, release: Optional[str]) -> Plan:
        states = {edit: edit.classify(source) for edit in self.edits}
        unknown = [e for e, s in states.items() if s == "unknown"]
        if unknown:
            return Plan(Verdict.REFUSED, f"SGLang {release}: {target} has an unknown shape (neither {unknown[0].old!r} nor the fixed form)")
        needed = tuple(e for e, s in states.items() if s == "broken")
        if not needed:
            return Plan(Verdict.NOT_NEEDED, f"{target}: upstream already {'; '.join(e.why for e in self.edits)}")
        return Plan(Verdict.APPLY, f"{target}: " + "; ".join(e.why for e in needed), ((target, needed),))

    def replacement(self, func: Any, owner: type, payload: Any) -> Any:
        return rebuild(func, owner, payload)


class WrapPatch(MethodPatch):
    """Wraps one SGLang method, e.g. to check a configuration at start-up.

    ``condition(source) -> (Verdict, reason)`` decides from the method's
    source; ``wrapper(original) -> function``
    builds the replacement (use functools.wraps).
    """

    def __init__(self, name: str, summary: str, alternatives: Tuple[Target, ...],
                 condition: Callable[[str], Tuple[str, str]] = None, wrapper: Callable[[Any], Any] = None, *,
                 injected: Optional[Dict[str, Callable]] = None):
        super().__init__(name, summary, alternatives, injected=injected)
        self.condition = condition
        self.wrapper = wrapper

    def assess(self, target: Target, source: str, release: Optional[str]) -> Plan:
        verdict, reason = self.condition(source)
        verdict = Verdict(verdict)
        where = f"SGLang {release}: {target}" if verdict == Verdict.REFUSED else str(target)
        return Plan(verdict, f"{where}: {reason}", ((target, None),) if verdict == Verdict.APPLY else ())

    def replacement(self, func: Any, owner: type, payload: Any) -> Any:
        return self.wrapper(func)


def plan_all(patches: Sequence[MethodPatch], release: Optional[str]) -> Dict[str, Plan]:
    """Each patch's plan for the installed release; touches nothing."""
    return {patch.name: patch.plan(release) for patch in patches}


def apply_all(patches: Sequence[MethodPatch], release: Optional[str],
              plans: Optional[Dict[str, Plan]] = None) -> Dict[str, Plan]:
    """Apply every patch or none (``plans``: :func:`plan_all`'s result, when
    the caller has it already).

    Refusals are found before anything is touched and reported together; a
    failure while applying reverts the patches applied by this call.
    """
    plans = plans if plans is not None else plan_all(patches, release)
    refused = [f"patch {name}: {plan.reason}" for name, plan in plans.items() if plan.verdict == Verdict.REFUSED]
    if refused:
        raise EngineError("; ".join(refused))
    done: List[MethodPatch] = []
    try:
        for patch in patches:
            if not patch.applied:
                patch.apply(release, plans[patch.name])
                if patch.applied:
                    done.append(patch)
    except BaseException:
        revert_all(done)
        raise
    return plans


def revert_all(patches: Sequence[MethodPatch]) -> None:
    """Revert in reverse order of application."""
    for patch in reversed(list(patches)):
        patch.revert()
