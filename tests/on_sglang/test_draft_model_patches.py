"""The DFLASH-only sites of the installed release, and what the loader does at each.

Every site the probe finds (``engine.dflash_sites``) has a verdict, and the
docs/reference/draft-model-sites.md lists it for this release; each *declared* site's function is
rebuilt by ``patches.draft_model`` so that its predicate asks the plugin's
``DraftModel`` (and gives every built-in algorithm the release's answer), and
reverting restores it. What the served sites do end to end is proven by
``test_draft_model_serve.py`` (captured target layers, the draft KV budget,
input_embeds in the draft's dtype) and, with CUDA graphs, by the GPU phases
(``tools/gpu/engine/run.sh draft``).
"""

import re
from pathlib import Path

import pytest

from sglang_spec_plugins.draft_model import NEEDS, DraftModel
from sglang_spec_plugins.engine.dflash_sites import DECLARED, UNKNOWN, dflash_sites, summary, verdict
from sglang_spec_plugins.engine.probe import probe, source_file
from sglang_spec_plugins.patches import draft_model
from sglang_spec_plugins.patches.unit import Verdict, apply_all, plan_all, revert_all

ROOT = Path(__file__).resolve().parents[2]
RELEASE = probe().version


def _sites():
    return dflash_sites(source_file("sglang.srt.managers.scheduler").parents[1])


def _readme_rows():
    text = (ROOT / "docs" / "reference" / "draft-model-sites.md").read_text()
    table = text.split("<!-- dflash-sites:start")[1].split("<!-- dflash-sites:end -->")[0]
    import releases  # tools/releases.py: the table's release ranges

    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), set(releases.expand_ranges(cells[2])), cells[3]))
    return rows


def test_every_dflash_only_site_of_the_release_has_a_verdict_and_a_readme_row():
    found = _sites()
    assert found, "the probe finds no DFLASH-only site: its patterns no longer match this release"
    import releases

    if RELEASE not in releases.DRAFT_MODEL_RELEASES:  # refused whole there: no site is served
        plans = plan_all(draft_model.PATCHES, RELEASE)
        assert all(p.verdict == Verdict.NOT_NEEDED and "served from 0.5.14" in p.reason for p in plans.values()), plans
        pytest.skip(f"SGLang {RELEASE} serves no draft-model plugin (0.5.14+)")
    assert [s.where for s in found if verdict(s) is UNKNOWN] == []
    counted = summary()  # what doctor reports
    assert counted["unexamined"] == [] and counted["served"] + counted["answered"] + sum(counted["refused"].values()) \
        == len(found)
    here = {(s.file, s.function, _cell(verdict(s))) for s in found}
    listed = {(f, fn, what) for f, fn, rels, what in _readme_rows() if RELEASE in rels}
    assert here == listed, (sorted(here - listed), sorted(listed - here))


def _cell(judged):
    return {"declared": f"served: `DraftModel.{judged.need}`", "answered": "answered",
            "refused": f"refused with `{judged.need}`"}[judged.kind]


def test_built_in_algorithms_get_the_releases_answer_and_a_declaration_its_own():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    for member in SpeculativeAlgorithm:
        for predicate in ("is_dflash", "is_dflash_family"):
            if hasattr(member, predicate):
                for need in NEEDS:
                    assert draft_model.dflash_like(member, predicate, need) == getattr(member, predicate)()

    class Plugin:  # what spec_class_for builds, reduced to the attributes dflash_like reads
        def is_dflash_family(self):
            return False

    from sglang_spec_plugins.engine.algorithm import _PolicyMethods

    declared = type("Declared", (_PolicyMethods, Plugin), {"draft_model": DraftModel(kv_pool=False)})()
    assert draft_model.dflash_like(declared, "is_dflash_family", "capture_target_layers") is True
    assert draft_model.dflash_like(declared, "is_dflash_family", "kv_pool") is False
    none = type("NoDraft", (_PolicyMethods, Plugin), {"draft_model": None})()
    assert draft_model.dflash_like(none, "is_dflash_family", "input_embeds") is False


def test_each_declared_site_is_rebuilt_to_ask_the_declaration_and_restored_on_revert():
    import importlib

    if RELEASE not in __import__("releases").DRAFT_MODEL_RELEASES:
        pytest.skip(f"SGLang {RELEASE} serves no draft-model plugin (0.5.14+)")
    declared = [s for s in _sites() if verdict(s).kind == DECLARED]
    assert declared
    plans = plan_all(draft_model.PATCHES, RELEASE)
    assert [n for n, p in plans.items() if p.verdict == Verdict.REFUSED] == []
    applied = [p for p in draft_model.PATCHES if plans[p.name].verdict == Verdict.APPLY]
    assert {p.key for p in applied if isinstance(p, draft_model.SitePatch)} == {s.key for s in declared}

    def current(site):
        module = importlib.import_module(site.module)
        owner, _, name = site.outer.rpartition(".")
        return getattr(getattr(module, owner), name) if owner else getattr(module, name)

    def asks(func, need):
        codes, found = [func.__code__], set()
        while codes:
            code = codes.pop()
            found.update(code.co_names)
            codes += [c for c in code.co_consts if hasattr(c, "co_names")]
            if need in code.co_consts:
                found.add(f"need:{need}")
        return "_sglang_spec_plugins_dflash_like" in found and f"need:{need}" in found

    before = [p for p in draft_model.PATCHES if p.applied]  # the loader of this session may have applied them
    revert_all(before)
    try:
        originals = {s.outer: current(s).__code__ for s in declared}
        assert not any(asks(current(s), verdict(s).need) for s in declared)
        apply_all(draft_model.PATCHES, RELEASE, plans)
        for site in declared:
            assert asks(current(site), verdict(site).need), f"{site.where} ({site.outer}) does not ask the declaration"
        source = current(declared[0]).__code__.co_filename
        assert Path(source).name == Path(declared[0].file).name  # tracebacks still point at SGLang's file
    finally:
        revert_all(draft_model.PATCHES)
        restored = {s.outer: current(s).__code__ for s in declared}
        apply_all(before, RELEASE)
    assert restored == originals


def test_the_input_embeds_cast_follows_the_draft_models_dtype_only_for_a_declaring_plugin():
    import torch

    from sglang_spec_plugins.engine.algorithm import _PolicyMethods
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    embeds = torch.ones(2, 3, dtype=torch.float32)
    runner = type("Runner", (), {"dtype": torch.float32})()
    runner.spec_algorithm = type("Declared", (_PolicyMethods,), {"draft_model": DraftModel()})()
    assert draft_model.input_embeds_for(runner, embeds).dtype == torch.float32
    runner.spec_algorithm = SpeculativeAlgorithm.DFLASH
    assert draft_model.input_embeds_for(runner, embeds).dtype == torch.bfloat16  # the release's cast, unchanged
    plan = draft_model.INPUT_EMBEDS.plan(RELEASE)
    if RELEASE not in __import__("releases").DRAFT_MODEL_RELEASES:  # the plugin is refused before any draft forward
        assert plan.verdict == Verdict.NOT_NEEDED and "served from 0.5.14" in plan.reason, plan.reason
        return
    assert plan.verdict == Verdict.APPLY, plan.reason
    assert re.search(r"ModelRunner\.(_extend_forward_kwargs|forward_extend)", plan.reason)
