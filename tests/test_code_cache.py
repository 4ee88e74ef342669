"""The compiled code of a rebuilt function is kept between processes (patches/code_cache.py): the code
compiling gives, taken without cutting the source while the file's size and time are as they were, the file
cut and every edit checked again once they differ, a bad entry built again, never an error."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from sglang_spec_plugins.cache_entries import CACHE_ENV
from sglang_spec_plugins.engine import source_text
from sglang_spec_plugins.patches import code_cache, source_edit
from sglang_spec_plugins.patches.source_edit import Edit, rebuild

SOURCE = '''
class Base:
    def step(self, x):
        return x


class Runner(Base):
    def step(self, x):
        width = 2
        return super().step(x) * width


def top(x):
    width = 2
    return x * width
'''
EDIT = Edit(old="width = 2", new="width = 3", fixed_markers=("width = 3",), why="-")


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "rebuilt_here.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("rebuilt_here", path)
    found = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(found)
    yield found
    sys.modules.pop("rebuilt_here", None)


def _rebuilt(module):
    return rebuild(module.top, module, (EDIT,)), rebuild(module.Runner.step, module.Runner, (EDIT,))


def _entries(tmp_path):
    return sorted((tmp_path / "cache").glob("code-*.marshal"))


def test_a_later_rebuild_takes_the_kept_code(monkeypatch, tmp_path, module):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    top, step = _rebuilt(module)
    assert top(1) == 3 and step(module.Runner(), 1) == 3  # the __class__ cell: super() works
    assert len(_entries(tmp_path)) == 2

    def not_compiled(*args, **kwargs):
        raise AssertionError("kept code is not compiled")

    monkeypatch.setattr(source_edit, "compile", not_compiled, raising=False)
    kept_top, kept_step = _rebuilt(module)
    assert kept_top.__code__ == top.__code__ and kept_step.__code__ == step.__code__
    assert kept_top(1) == 3 and kept_step(module.Runner(), 1) == 3
    assert kept_top.__code__.co_filename == module.__file__ and kept_top.__code__.co_firstlineno == module.top.__code__.co_firstlineno == 13


def test_kept_code_is_taken_without_cutting_the_source(monkeypatch, tmp_path, module):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    top, step = _rebuilt(module)

    def not_cut(func):
        raise AssertionError("kept code: the source is not cut")

    monkeypatch.setattr(source_edit, "source_of", not_cut)
    kept_top, kept_step = _rebuilt(module)
    assert kept_top.__code__ == top.__code__ and kept_step(module.Runner(), 1) == 3


def test_a_file_changed_since_is_cut_and_checked_again(monkeypatch, tmp_path, module):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    top, _ = _rebuilt(module)
    path = Path(module.__file__)
    later = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(later, later))  # the same text, another time: cut again, the same code
    cut, real = [], source_edit.source_of
    monkeypatch.setattr(source_edit, "source_of", lambda func: cut.append(func.__qualname__) or real(func))
    again_top, _ = _rebuilt(module)
    assert cut == ["top", "Runner.step"] and again_top.__code__ == top.__code__
    path.write_text(SOURCE.replace("width = 2", "width = 5"))  # the same size, no old line: the edit is refused
    os.utime(path, ns=(later + 10**9, later + 10**9))
    source_text._read.cache_clear()  # the text read in this process
    with pytest.raises(ValueError, match="expected the line 'width = 2' once, found it 0 times"):
        rebuild(module.top, module, (EDIT,))


def test_the_edit_is_checked_on_the_source_with_kept_code(monkeypatch, tmp_path, module):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    _rebuilt(module)
    with pytest.raises(ValueError, match="expected the line 'width = 4' once"):
        rebuild(module.top, module, (Edit(old="width = 4", new="pass", fixed_markers=(), why="-"),))


@pytest.mark.parametrize("damage", [
    lambda data: data[:-7],  # torn
    lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # another payload
    lambda data: data[:len(code_cache.FORMAT)] + bytes(20) + data[len(code_cache.FORMAT) + 20:],  # another key
    lambda data: b"",
    lambda data: b"\x00" * len(data),
])
def test_a_bad_entry_is_compiled_again_and_rewritten(monkeypatch, tmp_path, module, damage):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    top, step = _rebuilt(module)
    whole = {path: path.read_bytes() for path in _entries(tmp_path)}
    for path, data in whole.items():
        path.write_bytes(damage(data))
    again_top, again_step = _rebuilt(module)
    assert again_top.__code__ == top.__code__ and again_step(module.Runner(), 1) == 3
    assert {path: path.read_bytes() for path in _entries(tmp_path)} == whole


def test_a_code_object_of_another_optimization_level_is_another_entry(monkeypatch, tmp_path, module):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    _rebuilt(module)
    monkeypatch.setattr(code_cache.sys, "flags", type("Flags", (), {"optimize": 2})())
    _rebuilt(module)
    assert len(_entries(tmp_path)) == 4


def test_with_the_cache_off_nothing_is_kept(monkeypatch, tmp_path, module):
    monkeypatch.setenv(CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _rebuilt(module)[0](1) == 3
    assert not (tmp_path / "xdg").exists()
