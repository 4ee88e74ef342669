"""source_edit.rebuild: a function rebuilt from its edited source, in every process, from the file as it is now
(no code is kept between processes): the edit applied, zero-argument ``super()`` working, the original file and
line numbers in its code, an edit whose line is not there refused."""

import importlib.util
import sys

import pytest

from sglang_spec_plugins.engine import source_text
from sglang_spec_plugins.patches.source_edit import Edit, rebuild

SOURCE = '''from __future__ import annotations


class Base:
    def step(self, x):
        return x


class Runner(Base):
    def step(self, x) -> Unknown:
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


def test_a_rebuilt_function_runs_the_edit_at_its_own_place(module):
    top, step = rebuild(module.top, module, (EDIT,)), rebuild(module.Runner.step, module.Runner, (EDIT,))
    assert top(1) == 3 and step(module.Runner(), 1) == 3  # the __class__ cell: super() works
    assert step.__annotations__ == {"return": "Unknown"}  # compiled under the module's postponed annotations
    for new, old in ((top, module.top), (step, module.Runner.step)):
        assert (new.__code__.co_filename, new.__code__.co_firstlineno) == (module.__file__, old.__code__.co_firstlineno)
        assert new.__qualname__ == old.__qualname__


def test_the_file_as_it_is_now_is_what_is_rebuilt(module, tmp_path):
    """Each rebuild reads the installed file: one edited since (here the line the edit replaces gone) is refused."""
    rebuild(module.top, module, (EDIT,))
    path = tmp_path / "rebuilt_here.py"
    path.write_text(SOURCE.replace("width = 2", "width = 5"))
    source_text._read.cache_clear()  # the text read earlier in this process
    with pytest.raises(ValueError, match="expected the line 'width = 2' once, found it 0 times"):
        rebuild(module.top, module, (EDIT,))


def test_an_edit_whose_line_is_not_there_is_refused(module):
    with pytest.raises(ValueError, match="expected the line 'width = 4' once"):
        rebuild(module.top, module, (Edit(old="width = 4", new="pass", fixed_markers=(), why="-"),))
