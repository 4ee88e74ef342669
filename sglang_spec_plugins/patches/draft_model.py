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

(A method is replaced on its class, a top-level function gets the edited code
in place, as every function patch does: :mod:`.unit`.)

Before the speculative algorithm is resolved, 0.5.14+ reads the draft's
``config.json`` (``_resolve_speculative_algorithm_alias``, for any algorithm
given ``--speculative-draft-model-path``), ahead of every plugin validator: a
missing folder or a ``config.json`` that is no JSON object met SGLang's
reading raw ("Repo id must be in the form ..."). ``draft_model.draft_checkpoint``
checks a draft-model plugin's checkpoint there first
(:func:`refuse_draft_checkpoint`).

One more edit serves ``input_embeds`` outside those sites: every release
casts a forward's ``input_embeds`` to bfloat16 for any model
(``ModelRunner._extend_forward_kwargs``; ``forward_extend`` up to 0.5.13),
which a float16 or float32 draft model cannot take (its linear layers refuse
the mix); for a plugin whose draft takes ``input_embeds`` they are cast to
the runner's dtype (:func:`input_embeds_for`).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Tuple

from ..draft_model import checkpoint_config
from ..engine.algorithm import draft_model_of, policy_of
from ..errors import BEFORE_WEIGHTS
from ..engine.dflash_sites import DECLARED, VERDICTS, dflash_sites, verdict
from ..engine.dflash_sites import Verdict as SiteVerdict
from ..engine.probe import source_file
from .source_edit import Edit
from .unit import FunctionPatch, Plan, Target, Verdict, WrapPatch

_ASK = "_sglang_spec_plugins_dflash_like"


def dflash_like(algorithm: Any, predicate: str, need: str) -> bool:
    """``algorithm.<predicate>()``, except True for a plugin algorithm whose
    draft-model declaration asks for ``need``."""
    declared = draft_model_of(algorithm)
    if declared is not None and getattr(declared, need):
        return True
    return getattr(algorithm, predicate)()


def input_embeds_for(runner: Any, embeds: Any) -> Any:
    """``embeds`` for ``runner``'s model: in its dtype for a plugin algorithm
    whose draft model takes ``input_embeds``, else in bfloat16 (the release's cast)."""
    declared = draft_model_of(runner.spec_algorithm)
    if declared is not None and declared.input_embeds:
        return embeds.to(runner.dtype)
    return embeds.bfloat16()


_EMBEDS = "_sglang_spec_plugins_input_embeds"


class DraftModelPatch(FunctionPatch):
    """A function patch for draft-model plugins, which SGLang 0.5.14+ serves
    (before, the start-up check refuses them): not needed on older releases."""

    def plan(self, release: Optional[str]) -> Plan:
        return _unserved(release) or self.plan_served(release)

    def plan_served(self, release: Optional[str]) -> Plan:
        return super().plan(release)


INPUT_EMBEDS = DraftModelPatch(
    name="draft_model.input_embeds_dtype",
    summary="a forward's input_embeds in the draft model's dtype, not always bfloat16",
    alternatives=(Target("sglang.srt.model_executor.model_runner", "ModelRunner._extend_forward_kwargs"),  # 0.5.14+
                  Target("sglang.srt.model_executor.model_runner", "ModelRunner.forward_extend")),  # up to 0.5.13
    edits=(Edit(old='kwargs["input_embeds"] = forward_batch.input_embeds.bfloat16()',
                new=f'kwargs["input_embeds"] = {_EMBEDS}(self, forward_batch.input_embeds)',
                fixed_markers=("forward_batch.input_embeds.to(",),
                why="casts a draft-model plugin's input_embeds to its draft runner's dtype"),),
    injected={_EMBEDS: input_embeds_for},
)


class SitePatch(DraftModelPatch):
    """The declared sites of one SGLang function (``key``: file, function as
    :class:`~..engine.dflash_sites.DflashSite` names them), each predicate
    asking the declaration's need; the edits are made from the sites the
    installed source has (none: not needed)."""

    def __init__(self, key: Tuple[str, str]):
        self.key = key
        file, function = key
        parts = function.split(".")
        outer = ".".join(parts[:2]) if parts[0][:1].isupper() and len(parts) > 1 else parts[0]
        module = "sglang.srt." + file[: -len(".py")].replace("/", ".")
        super().__init__(name=f"draft_model.{function}", summary=f"{file} {function}: {_declared(key)[0].why}",
                         alternatives=(Target(module, outer),), injected={_ASK: dflash_like})

    def plan_served(self, release: Optional[str]) -> Plan:
        file, function = self.key
        target = self.alternatives[0]
        path, source = source_file(target.module), target.source()
        srt = path.parents[file.count("/")] if path is not None else None
        sites = [s for s in dflash_sites(srt) if s.key == self.key and verdict(s).kind == DECLARED] \
            if source is not None else []
        if not sites:
            return Plan(Verdict.NOT_NEEDED, f"SGLang {release}: no declared DFLASH-only decision in {file} {function}")
        edits = []
        for line in sorted({s.code for s in sites}):
            new = line
            for site in (s for s in sites if s.code == line):
                call = f"{site.receiver}.{site.test}"
                new = new.replace(call, f'{_ASK}({site.receiver}, "{site.test[:-2]}", "{verdict(site).need}")')
            edit = Edit(old=line, new=new, fixed_markers=(), why=verdict(sites[0]).why, every=True)
            if new == line or edit.classify(source) != "broken":
                where = ", ".join(s.where for s in sites if s.code == line)
                return Plan(Verdict.REFUSED, f"SGLang {release}: {file} {function}: the DFLASH-only decision at {where} "
                                             f"({line!r}) cannot be edited alone")
            edits.append(edit)
        return Plan(Verdict.APPLY, f"{target}: {verdict(sites[0]).why}", ((target, tuple(edits)),))


def _declared(key: Tuple[str, str]):
    """The declared verdicts ``VERDICTS[key]`` holds."""
    found = VERDICTS[key]
    return [judged for judged in ([found] if isinstance(found, SiteVerdict) else [j for _, j in found])
            if judged.kind == DECLARED]


def refuse_draft_checkpoint(algorithm_name: Any, path: Any) -> None:
    """Refuse, naming the plugin, the ``--speculative-draft-model-path`` of a plugin algorithm with a draft
    model that is no local checkpoint SGLang can read (:func:`~..draft_model.checkpoint_config`: no such
    folder and no repo id, no ``config.json``, not a JSON object); anything else is left to SGLang."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if not path or not isinstance(algorithm_name, str):
        return
    try:
        algorithm = SpeculativeAlgorithm.from_string(algorithm_name)
    except (ValueError, KeyError):
        return  # not a registered name: SGLang refuses it itself
    policy = policy_of(algorithm)
    if policy is None or draft_model_of(algorithm) is None:
        return
    why, _ = checkpoint_config(path)
    if isinstance(why, str):
        raise policy.fault(f"--speculative-draft-model-path {path}: {why}{BEFORE_WEIGHTS}")


def _checkpoint_wrapper(original):
    @functools.wraps(original)
    def resolve_alias(*args, **kwargs):
        refuse_draft_checkpoint(args[0] if args else kwargs.get("speculative_algorithm"),
                                args[1] if len(args) > 1 else kwargs.get("speculative_draft_model_path"))
        return original(*args, **kwargs)

    return resolve_alias


def _unserved(release: Optional[str]) -> Optional[Plan]:
    """NOT_NEEDED on a release before draft-model plugins are served (0.5.14); else None."""
    from packaging.version import InvalidVersion, Version

    from ..draft_model import FIRST_RELEASE

    try:
        if release is not None and Version(release) < Version(FIRST_RELEASE):
            return Plan(Verdict.NOT_NEEDED, f"SGLang {release}: draft-model plugins are served from {FIRST_RELEASE}")
    except InvalidVersion:
        pass
    return None


class CheckpointPatch(WrapPatch):
    """:data:`DRAFT_CHECKPOINT`: served from 0.5.14 (as every draft-model patch); not needed where the
    release reads no draft config while it resolves the algorithm."""

    def plan(self, release: Optional[str]) -> Plan:
        unserved = _unserved(release)
        if unserved is not None:
            return unserved
        if not any(target.source() is not None for target in self.alternatives):
            return Plan(Verdict.NOT_NEEDED, f"SGLang {release}: reads no draft config while it resolves the algorithm")
        return super().plan(release)


DRAFT_CHECKPOINT = CheckpointPatch(
    name="draft_model.draft_checkpoint",
    summary="a draft-model plugin's --speculative-draft-model-path checked before SGLang reads its config.json",
    alternatives=(Target("sglang.srt.arg_groups.speculative_hook", "_resolve_speculative_algorithm_alias"),),
    condition=lambda source: (Verdict.APPLY, "reads the draft's config.json for any algorithm: a draft-model "
                                             "plugin's checkpoint is checked first, naming the plugin")
    if "get_config(" in source else (Verdict.NOT_NEEDED, "reads no draft config"),
    wrapper=_checkpoint_wrapper,
)


PATCHES = tuple(SitePatch(key) for key in VERDICTS if _declared(key)) + (INPUT_EMBEDS, DRAFT_CHECKPOINT)
"""One patch per SGLang function holding a declared site (a release without it: not needed), the
input_embeds cast and the draft checkpoint's check."""
