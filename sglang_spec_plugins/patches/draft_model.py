"""The DFLASH-only sites a draft-model plugin declares what it needs at.

For each SGLang function holding a *declared* site (:data:`~..engine.dflash_sites.VERDICTS`:
the target's hidden-state capture, the draft KV pool and its budget, the
draft runner's ``input_embeds`` in CUDA graphs), the patch rewrites the
site's predicate, ``X.is_dflash_family()`` (or ``is_dflash()``), into
:func:`dflash_like` ``(X, "is_dflash_family", need)``: for a plugin
algorithm whose :class:`~sglang_spec_plugins.draft_model.DraftModel`
declares ``need``, True, so SGLang runs its DFLASH branch there (DFLASH's
code, reading the DFlash-layout draft config); for every other algorithm
the original call, so built-in algorithms and plugins without a draft model
get exactly the release's behaviour. The sites are found in the installed
source (:func:`~..engine.dflash_sites.dflash_sites`), so the edits follow each
release's lines; a site whose line cannot be edited alone is refused.

Methods are replaced on their class (as every function patch); a module-level
function gets the edited code in place (``__code__``), so the copies other
modules imported with ``from ... import`` run it too.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ..engine.algorithm import policy_of
from ..engine.dflash_sites import DECLARED, VERDICTS, dflash_sites
from ..engine.probe import method_source, source_file
from ..engine.source_text import function_in_file
from .source_edit import Edit, rebuild
from .unit import FunctionPatch, Plan, Target

_ASK = "_sglang_spec_plugins_dflash_like"


def draft_model_of(algorithm: Any):
    """The :class:`~sglang_spec_plugins.draft_model.DraftModel` a plugin
    algorithm declares, or None (a built-in algorithm, a plugin without one)."""
    policy = policy_of(algorithm)
    return None if policy is None else getattr(type(algorithm), "draft_model", None)


def dflash_like(algorithm: Any, predicate: str, need: str) -> bool:
    """``algorithm.<predicate>()``, except True for a plugin algorithm whose
    draft-model declaration asks for ``need``."""
    declared = draft_model_of(algorithm)
    if declared is not None and getattr(declared, need):
        return True
    return getattr(algorithm, predicate)()


class SitePatch(FunctionPatch):
    """The declared sites of one SGLang function (``key``: file, function)."""

    def __init__(self, key: Tuple[str, str]):
        file, function = key
        self.file, self.need = file, VERDICTS[key].need
        self.outer = function.split(".")[0] if not function[:1].isupper() else ".".join(function.split(".")[:2])
        self.function = function
        module = "sglang.srt." + file[: -len(".py")].replace("/", ".")
        super().__init__(name=f"draft_model.{function}", summary=f"{file} {function}: {VERDICTS[key].why}",
                         alternatives=(Target(module, self.outer),), injected={_ASK: dflash_like})

    @property
    def module_function(self) -> bool:
        return "." not in self.outer

    def _source(self) -> Optional[str]:
        target = self.alternatives[0]
        if not self.module_function:
            return method_source(target.module, target.qualname)
        path = source_file(target.module)
        return None if path is None else function_in_file(path, self.outer)

    def plan(self, release: Optional[str]) -> Plan:
        target = self.alternatives[0]
        path = source_file(target.module)
        source = self._source()
        sites = [s for s in dflash_sites(path.parents[len(self.file.split("/")) - 1]) if s.key == (self.file, self.function)] \
            if path is not None and source is not None else []
        if not sites:
            return Plan("not needed", f"SGLang {release}: no DFLASH-only decision in {self.file} {self.function}")
        edits = []
        for line in sorted({s.code for s in sites}):
            new = line
            for site in sites:
                if site.code == line:
                    predicate = site.test[: -len("()")]
                    new = new.replace(f"{site.receiver}.{site.test}", f'{_ASK}({site.receiver}, "{predicate}", "{self.need}")')
            edits.append(Edit(old=line, new=new, fixed_markers=(), why=VERDICTS[(self.file, self.function)].why, every=True))
        for edit in edits:
            if edit.new == edit.old or edit.classify(source) != "broken":
                where = ", ".join(s.where for s in sites if s.code == edit.old)
                return Plan("refused", f"SGLang {release}: {self.file} {self.function}: the DFLASH-only decision at "
                                       f"{where} ({edit.old!r}) cannot be edited alone")
        return Plan("apply", f"{target}: {edits[0].why}", ((target, tuple(edits)),))

    def _install(self, plan: Plan, release: Optional[str]) -> None:
        if not self.module_function:
            return super()._install(plan, release)
        import importlib

        (target, edits), = plan.steps
        func = getattr(importlib.import_module(target.module), self.outer)
        new = rebuild(func, None, edits)
        if new.__code__.co_freevars != func.__code__.co_freevars:
            raise ValueError(f"patch {self.name}: {self.outer} cannot take edited code in place")
        saved = {k: func.__globals__[k] for k in self.injected if k in func.__globals__}
        func.__globals__.update(self.injected)
        original, func.__code__ = func.__code__, new.__code__
        self._originals.append((func, "__code__", original, saved))

    def revert(self) -> None:
        if not self.module_function:
            return super().revert()
        while self._originals:
            func, _, code, saved = self._originals.pop()
            func.__code__ = code
            for key in self.injected:
                func.__globals__.pop(key, None)
            func.__globals__.update(saved)


PATCHES = tuple(SitePatch(key) for key, verdict in VERDICTS.items() if verdict.kind == DECLARED)
"""One patch per SGLang function holding a declared site (a release without it: not needed)."""
