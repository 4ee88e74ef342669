"""installed.py: the plugins' entry points, the scan of the installed distributions kept between processes."""

import importlib
import os
import shutil
from importlib import metadata

import pytest

from dists import simple_plugin
from sglang_spec_plugins import config, installed
from sglang_spec_plugins.cache_entries import CACHE_ENV
from sglang_spec_plugins.plugins import ENTRY_POINT_GROUP, discover


@pytest.fixture
def cache(site, tmp_path, monkeypatch):
    """The cache in a folder of its own, and a count of the scans made."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    scans = []
    real = metadata.entry_points

    def counted(**kwargs):
        scans.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(installed.metadata, "entry_points", counted)
    return scans


def plugins(write_toml):
    """The plugins discovery loads, as a process starting now does (a fresh scan of the finders' view)."""
    importlib.invalidate_caches()
    return sorted(p.name for p in discover(config.load(write_toml("[plugins]\n"))).plugins)


def add(site, name):
    site.add(f"{name}-drafter", {name: f"{name}_mod"}, {f"{name}_mod": simple_plugin(name.upper(), width="2")})


def test_a_later_process_takes_the_kept_distributions_without_a_scan(site, cache, write_toml):
    add(site, "alpha")
    assert "alpha" in plugins(write_toml) and len(cache) == 1
    assert "alpha" in plugins(write_toml) and len(cache) == 1  # nothing installed since: no scan
    assert installed.plugin_entry_points(ENTRY_POINT_GROUP) == list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def test_an_install_and_an_uninstall_are_seen(site, cache, write_toml):
    add(site, "alpha")
    before = plugins(write_toml)
    add(site, "beta")  # a new dist-info in a sys.path folder
    assert plugins(write_toml) == sorted(before + ["beta"])
    shutil.rmtree(next(site.path.glob("alpha_drafter-*.dist-info")))  # pip uninstall removes it
    assert "alpha" not in plugins(write_toml) and "beta" in plugins(write_toml)
    assert len(cache) == 3  # each change scanned once; the last call a hit


def test_an_entry_points_file_gaining_the_group_is_seen(site, cache, write_toml):
    """A distribution the kept entry does not name, whose entry_points.txt is rewritten in place (its
    folder's listing unchanged): its size and time are in the fingerprint."""
    add(site, "alpha")
    add(site, "gamma")
    info = next(site.path.glob("gamma_drafter-*.dist-info"))
    (info / "entry_points.txt").write_text("[console_scripts]\ngamma = gamma_mod:main\n")
    assert "gamma" not in plugins(write_toml)
    folder = os.stat(site.path)
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ngamma = gamma_mod\n")
    assert os.stat(site.path) == folder  # no name added or removed there
    assert "gamma" in plugins(write_toml)


def test_a_moved_sys_path_is_another_entry(site, cache, write_toml, tmp_path, monkeypatch):
    add(site, "alpha")
    assert "alpha" in plugins(write_toml)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p != str(site.path)])
    assert "alpha" not in plugins(write_toml)


def test_another_finder_of_distributions_scans_every_time(site, cache, write_toml, monkeypatch):
    class Finder:
        @staticmethod
        def find_spec(*args):
            return None

        @staticmethod
        def find_distributions(*args, **kwargs):
            return iter(())

    add(site, "alpha")
    monkeypatch.setattr("sys.meta_path", [*__import__("sys").meta_path, Finder])
    plugins(write_toml)
    plugins(write_toml)
    assert len(cache) == 2


def test_off_scans_every_time(site, cache, write_toml, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, "off")
    add(site, "alpha")
    plugins(write_toml)
    plugins(write_toml)
    assert len(cache) == 2
