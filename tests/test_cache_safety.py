"""Nobody else's files: a cache folder or entry that another user owns or that group or others can write is not
used (one warning naming the path and why), and an entry is taken only for what it was computed from.

The tests run as root here, so "another user" is a uid chowned onto a file (root may do that)."""

import json
import logging
import os
from pathlib import Path

import pytest

from dists import make_dist, simple_plugin
from sglang_spec_plugins import loader
from sglang_spec_plugins.engine import source_cache
from sglang_spec_plugins.engine.source_cache import CACHE_ENV, cached

OTHER_UID = 12345
"""A user this process is not (nor root)."""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chowning a file to another user needs root")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "srt"
    root.mkdir()
    (root / "a.py").write_text("A = 1\n")
    return root


class Counting:
    """A compute function that counts its calls and returns the files' text."""

    def __init__(self, root):
        self.root, self.calls = root, 0

    def __call__(self, files):
        self.calls += 1
        return {rel: Path(path).read_text() for rel, path, _, _ in files}


def ask(root, cache):
    compute = Counting(root)
    value = cached("test", root, (source_cache,), compute, lambda v: v, dict, environ={CACHE_ENV: str(cache)})
    return value, compute.calls


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "sglang_spec_plugins" and r.levelno == logging.WARNING]


def made_unsafe(path: Path, how: str) -> str:
    """Make ``path`` unsafe ``how``; what the warning must say about it."""
    if how == "owned by another user":
        os.chown(path, OTHER_UID, OTHER_UID)
        return f"owned by uid {OTHER_UID}"
    if how == "writable by a group":  # a group of its own, not the owner's private group
        os.chown(path, -1, OTHER_UID)
    mode = (0o770 if path.is_dir() else 0o660) if how == "writable by a group" else (0o707 if path.is_dir() else 0o606)
    os.chmod(path, mode)
    return f"writable by group {OTHER_UID} (mode {mode:04o})" if how == "writable by a group" else f"writable by others (mode {mode:04o})"


UNSAFE = [pytest.param("owned by another user", marks=needs_root), "writable by others",
          pytest.param("writable by a group", marks=needs_root)]


@pytest.mark.parametrize("how", UNSAFE)
def test_a_folder_others_can_write_is_not_used(tree, tmp_path, caplog, how):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    why = made_unsafe(cache, how)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 1)
        assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 1)  # nothing kept: computed again
    assert list(cache.iterdir()) == []  # nor written
    (warning,) = warnings_of(caplog)  # one, in one process
    assert str(cache) in warning and why in warning and "not used" in warning, warning


@pytest.mark.parametrize("how", UNSAFE)
def test_an_entry_planted_or_left_writable_is_not_used(tree, tmp_path, caplog, how):
    cache = tmp_path / "cache"
    assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 1)
    (entry,) = cache.iterdir()
    planted = json.loads(entry.read_text())
    planted["value"] = {"a.py": "import os  # planted\n"}  # whole, of the right key and times: only whose it is tells
    entry.write_text(json.dumps(planted))
    why = made_unsafe(entry, how)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 1)
    (warning,) = warnings_of(caplog)
    assert str(entry) in warning and why in warning and "not used" in warning, warning
    assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 0)  # replaced by this user's own entry, taken from then on
    assert entry.stat().st_uid == os.geteuid() and entry.stat().st_mode & 0o077 == 0


def test_a_symlinked_entry_is_not_followed(tree, tmp_path, caplog):
    cache = tmp_path / "cache"
    ask(tree, cache)
    (entry,) = cache.iterdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(entry.read_text().replace("A = 1", "B = 2"))
    entry.unlink()
    entry.symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 1)
    (warning,) = warnings_of(caplog)
    assert str(entry) in warning and "symbolic link" in warning, warning


def test_entries_and_folder_are_this_user_s_alone_whatever_the_umask(tree, tmp_path):
    cache = tmp_path / "made" / "cache"
    was = os.umask(0o002)  # a user-private-group umask: files group-writable by default
    try:
        ask(tree, cache)
    finally:
        os.umask(was)
    (entry,) = cache.iterdir()
    assert cache.stat().st_mode & 0o777 == 0o700 and entry.stat().st_mode & 0o777 == 0o600
    assert ask(tree, cache) == ({"a.py": "A = 1\n"}, 0)  # and taken


def test_a_warning_names_the_folder_a_symlink_leads_to(tree, tmp_path, caplog):
    real = tmp_path / "shared"
    real.mkdir()
    os.chmod(real, 0o777)
    link = tmp_path / "cache"
    link.symlink_to(real)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        ask(tree, link)
    (warning,) = warnings_of(caplog)
    assert f"{link} (-> {real})" in warning, warning


def _installed(site, name, algorithm):
    site.add(f"{name}-drafter", {name: f"{name}_mod"}, {f"{name}_mod": simple_plugin(algorithm, width="2")})


@pytest.mark.parametrize("owner", ["this user", pytest.param("another user", marks=needs_root)])
def test_a_rewritten_cached_copy_of_plugins_toml_changes_nothing(site, tmp_path, monkeypatch, owner):
    """The server serves what the operator's plugins.toml says, whatever the cache folder holds: every kept
    entry rewritten to enable the algorithm the file disables (and, for another user, chowned to them)."""
    _installed(site, "alpha", "ALPHA")
    _installed(site, "beta", "BETA")
    toml = tmp_path / "plugins.toml"
    toml.write_text('[plugins]\nenable = ["alpha", "beta"]\n[algorithms.BETA]\nenabled = false\n')
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(toml))
    assert sorted(loader.resolve()[1]) == ["ALPHA"]
    for entry in cache.iterdir():
        text = entry.read_text()
        entry.write_text(text.replace('"enabled": false', '"enabled": true'))
        if owner == "another user":
            os.chown(entry, OTHER_UID, OTHER_UID)
    assert sorted(loader.resolve()[1]) == ["ALPHA"]


@needs_root
def test_a_planted_entry_point_scan_loads_no_other_distribution(site, tmp_path, monkeypatch, caplog):
    """The kept scan names the distribution folders to read; one planted by another user, naming a folder of
    theirs, is not used."""
    from sglang_spec_plugins import installed
    from sglang_spec_plugins.plugins import ENTRY_POINT_GROUP

    _installed(site, "alpha", "ALPHA")
    theirs = tmp_path / "theirs"
    make_dist(theirs, "evil-drafter", {"evil": "evil_mod"}, {"evil_mod": simple_plugin("EVIL", width="2")})  # not on sys.path
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    assert [ep.name for ep in installed.plugin_entry_points(ENTRY_POINT_GROUP) if ep.name in ("alpha", "evil")] == ["alpha"]
    (entry,) = cache.glob("plugin-distributions-*")
    kept = json.loads(entry.read_text())
    kept["value"] = [str(p) for p in theirs.glob("*.dist-info")]
    entry.write_text(json.dumps(kept))
    os.chown(entry, OTHER_UID, OTHER_UID)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        names = [ep.name for ep in installed.plugin_entry_points(ENTRY_POINT_GROUP)]
    assert "evil" not in names and "alpha" in names
    assert any(str(entry) in w and f"owned by uid {OTHER_UID}" in w for w in warnings_of(caplog)), warnings_of(caplog)


def test_a_kept_scan_naming_a_folder_outside_sys_path_is_scanned_again(site, tmp_path, monkeypatch):
    """An entry is taken for what it was computed from: the scan finds distributions in the sys.path folders
    only, so a kept folder elsewhere (a rewritten entry, even this user's) makes it a scan."""
    from sglang_spec_plugins import installed
    from sglang_spec_plugins.plugins import ENTRY_POINT_GROUP

    _installed(site, "alpha", "ALPHA")
    theirs = tmp_path / "theirs"
    make_dist(theirs, "evil-drafter", {"evil": "evil_mod"}, {"evil_mod": simple_plugin("EVIL", width="2")})  # not on sys.path
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    installed.plugin_entry_points(ENTRY_POINT_GROUP)
    (entry,) = cache.glob("plugin-distributions-*")
    kept = json.loads(entry.read_text())
    kept["value"] = [str(p) for p in theirs.glob("*.dist-info")]
    entry.write_text(json.dumps(kept))
    names = [ep.name for ep in installed.plugin_entry_points(ENTRY_POINT_GROUP)]
    assert "evil" not in names and "alpha" in names

