"""The patches' plans kept between processes (patches/plan_cache.py) are the plans read off the release."""

import json
import os
import shutil
import subprocess
import sys

from sglang_spec_plugins import patches
from sglang_spec_plugins.engine import probe as engine_probe, source_text
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.engine.source_cache import CACHE_ENV
from sglang_spec_plugins.patches import catalogue, plan_cache, unit


def test_a_later_process_gets_the_plans_read_off_the_release(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    read = unit.plan_all(patches.PATCHES, release)
    assert plan_cache.planned(release) == read  # a miss: planned, and kept
    (entry,) = (tmp_path / "cache").glob("patch-plans-*")  # the probe keeps its runner locations beside it

    def not_planned(*args):
        raise AssertionError("a hit plans nothing")

    monkeypatch.setattr(unit, "plan_all", not_planned)
    kept = plan_cache.planned(release)
    assert kept == read
    assert [[(t, e) for t, e in p.steps] for p in kept.values()] == [[(t, e) for t, e in p.steps] for p in read.values()]
    assert {n: p.owner for n, p in kept.items()} == catalogue.OWNERS  # the module to import to apply each
    assert patches.serving_plans(probe()) == (read, [f"patch {n}: {p.reason}" for n, p in read.items() if p.verdict == "refused"])


def test_a_hit_imports_no_patch_module(monkeypatch, tmp_path):
    """A launcher takes the kept plans without importing the modules that define the patches."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    plan_cache.planned(release)
    script = (f"import sys\nfrom sglang_spec_plugins.patches import plan_cache\n"
              f"plans = plan_cache.planned({release!r})\n"
              "assert plans and all(p.owner for p in plans.values() if p.verdict == 'apply')\n"
              f"print(sorted(set({sorted(m.__name__ for m in catalogue.MODULES)!r}) & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_scheduler_imports_the_patches_of_the_backends_it_has_imported_only(monkeypatch, tmp_path):
    """SGLang's scheduler calls ``load_plugins()`` with its graph runner imported and no attention backend yet:
    the runner patches apply then, and an attention backend's patch module is imported with that backend
    only (most servers never import the aiter or trtllm_mha backends)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    plan_cache.planned(probe().version)
    script = ("import importlib, json, sys\n"
              "from sglang_spec_plugins.testing.cpu import install_stand_ins\n"
              "install_stand_ins()\n"
              "from sglang_spec_plugins import patches\n"
              "from sglang_spec_plugins.engine.probe import probe\n"
              "found = probe()\n"
              "importlib.import_module(found.graph_runner.split(':')[0])\n"
              "plans, reasons = patches.serving_plans(found)\n"
              "assert not reasons, reasons\n"
              "patches.apply_planned(plans, found.version)\n"
              "print(json.dumps({'imported': sorted(m for m in sys.modules if m.startswith('sglang')),\n"
              "                  'plans': {n: [p.owner, str(p.verdict), [t.module for t, _ in p.steps]] for n, p in plans.items()}}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    imported, targets = set(seen["imported"]), {}  # SGLang's modules and this package's
    for owner, _, modules in seen["plans"].values():
        targets.setdefault(owner, set()).update(modules)
    backends = {owner: modules for owner, modules in targets.items()
                if modules and all(m.startswith("sglang.srt.layers.attention.") for m in modules)}
    assert {"sglang_spec_plugins.patches.aiter", "sglang_spec_plugins.patches.trtllm_mha"} <= set(backends)
    for owner, modules in backends.items():
        assert (owner in imported) == bool(modules & imported), (owner, sorted(modules & imported))
    applied_now = {owner for owner, verdict, modules in seen["plans"].values() if verdict == "apply" and modules[0] in imported}
    assert applied_now and applied_now <= imported  # the graph runner's patches (capture_input's, at least)


def test_an_edited_file_of_this_package_is_planned_again(monkeypatch, tmp_path):
    """The kept plans follow this package's source files (which define and plan the patches): one of them
    edited (here in a copy of the package, the installed one left alone) plans every patch again."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    copy = tmp_path / "package"
    shutil.copytree(plan_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(plan_cache, "PACKAGE", copy)
    release = probe().version
    read = plan_cache.planned(release)
    planned_again = []
    real = unit.plan_all
    monkeypatch.setattr(unit, "plan_all", lambda *args: planned_again.append(args) or real(*args))
    assert plan_cache.planned(release) == read and not planned_again  # the same files: kept
    edited = copy / "patches" / "aiter.py"
    edited.write_text(edited.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert plan_cache.planned(release) == read and planned_again


def test_an_edited_sglang_file_is_planned_again(monkeypatch, tmp_path):
    """The plans follow the content of the SGLang files planning read: a patch target's file edited
    (here a copy of it, the installed release left alone) is read again, and its patch re-planned."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    read = unit.plan_all(patches.PATCHES, release)
    name, patch = next((p.name, p) for p in patches.PATCHES
                       if isinstance(p, unit.FunctionPatch) and p.edits and read[p.name].verdict == "apply"
                       and any(" " in e.old for e in read[p.name].steps[0][1]))
    target, edits = read[name].steps[0]
    installed = engine_probe.source_file(target.module)
    copy = tmp_path / installed.name
    copy.write_text(installed.read_text(encoding="utf-8"), encoding="utf-8")
    real = engine_probe.source_file
    monkeypatch.setattr(engine_probe, "source_file", lambda module: copy if module == target.module else real(module))

    def later_process():
        engine_probe.source_in.cache_clear()  # nothing read yet in a new process
        source_text._read.cache_clear()
        return plan_cache.planned(release)

    assert later_process() == read
    old = next(e.old for e in edits if " " in e.old)
    copy.write_text(copy.read_text(encoding="utf-8").replace(old, old.replace(" ", "  ", 1)), encoding="utf-8")
    replanned = later_process()
    assert replanned[name].verdict != "apply", replanned[name]
    assert replanned == unit.plan_all(patches.PATCHES, release)


def test_the_files_read_before_planning_in_the_process_are_in_the_entry(monkeypatch, tmp_path):
    """Sources this process had read already (the probe, an earlier plan) count as read by the planning: an
    entry naming none of them would outlive any edit of those files."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    engine_probe.source_in.cache_clear()
    source_text._read.cache_clear()
    with source_text.recording() as read:  # nothing read yet: every file planning reads or looks for
        unit.plan_all(patches.PATCHES, release)
    plan_cache.planned(release)  # each of them read already in this process
    (entry,) = (tmp_path / "cache").glob("patch-plans-*")  # the probe keeps its runner locations beside it
    recorded = set(json.loads(entry.read_text())["paths"])
    assert read and read <= recorded, sorted(read - recorded)


def test_plans_planted_by_another_user_are_not_used(monkeypatch, tmp_path, caplog):
    """Kept plans hold the edits compiled into SGLang's functions: an entry another user wrote (here every
    edit's new text rewritten, and the file chowned to uid 12345) is never applied; the plans are read again."""
    import logging

    import pytest

    if os.geteuid() != 0:
        pytest.skip("chowning a file to another user needs root")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    read = plan_cache.planned(release)
    (entry,) = (tmp_path / "cache").glob("patch-plans-*")
    kept = json.loads(entry.read_text())
    for _, _, _, steps in kept["value"].values():
        for step in steps:
            for edit in step[2] or ():
                edit[1] = "__import__('os').system('touch planted')\n"
    entry.write_text(json.dumps(kept))
    os.chown(entry, 12345, 12345)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        assert plan_cache.planned(release) == read
    assert any(str(entry) in r.getMessage() and "owned by uid 12345" in r.getMessage() for r in caplog.records), caplog.text
