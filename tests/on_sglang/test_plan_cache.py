"""The patches' plans kept between processes (patches/plan_cache.py) are the plans read off the release."""

from sglang_spec_plugins import patches
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.engine.source_cache import CACHE_ENV
from sglang_spec_plugins.patches import plan_cache, unit


def test_a_later_process_gets_the_plans_read_off_the_release(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    read = unit.plan_all(patches.PATCHES, release)
    assert plan_cache.planned(patches.PATCHES, release) == read  # a miss: planned, and kept
    (entry,) = (tmp_path / "cache").iterdir()

    def not_planned(*args):
        raise AssertionError("a hit plans nothing")

    monkeypatch.setattr(plan_cache, "plan_all", not_planned)
    kept = plan_cache.planned(patches.PATCHES, release)
    assert kept == read
    assert [[(t, e) for t, e in p.steps] for p in kept.values()] == [[(t, e) for t, e in p.steps] for p in read.values()]
    assert patches.serving_plans(probe()) == (read, [f"patch {n}: {p.reason}" for n, p in read.items() if p.verdict == "refused"])


def test_other_patches_are_planned_again(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    release = probe().version
    plan_cache.planned(patches.PATCHES, release)
    fewer = patches.PATCHES[1:]
    assert plan_cache.planned(fewer, release) == unit.plan_all(fewer, release)
