"""engine.source_text cuts a method out of a file's text; it must give what
inspect.getblock gives, including where a cheap cut would be wrong."""

import ast
import inspect
import textwrap

from sglang_spec_plugins.engine.source_text import method_in_file

SOURCE = '''
class Other:
    def f(self):
        return "other"


class Backend(Base):
    """Doc."""

    def plain(self, x):
        y = x + 1
        # a comment inside
        return y
        # a trailing comment inside the body

    # an outer comment
    def signature(
        self,
        a: int,
    ) -> int:
        return a

    async def coroutine(self):
        return 1


class Text:
    def text(self):
        s = """
not code
"""
        return s

    def after(self):
        return 0


class Continued:
    def continued(self):
        x = 1 + \\
2
        return x

    def after(self):
        return 0


class Bracket:
    def bracket(self):
        x = f(
1)
        return x

    def after(self):
        return 0


def f(self):
    return "module level"
'''


def via_getblock(lines, owner, name):
    start = next(j for j, line in enumerate(lines) if line.startswith(f"class {owner}"))
    at = next(i for i, line in enumerate(lines) if i > start and line.lstrip().startswith(f"def {name}("))
    return textwrap.dedent("".join(inspect.getblock(lines[at:])))


def test_method_in_file_matches_getblock(tmp_path):
    path = tmp_path / "module.py"
    path.write_text(SOURCE)
    lines = SOURCE.splitlines(keepends=True)
    cases = [("Backend", "plain"), ("Backend", "signature"), ("Text", "text"), ("Continued", "continued"),
             ("Bracket", "bracket")]
    for owner, name in cases:  # the last three need the fallback: a line at column 0 inside the method
        assert method_in_file(path, f"{owner}.{name}") == via_getblock(lines, owner, name), name
    assert "a trailing comment inside the body" in method_in_file(path, "Backend.plain")
    assert "an outer comment" not in method_in_file(path, "Backend.plain")
    assert method_in_file(path, "Other.f") == 'def f(self):\n    return "other"\n'


def test_method_in_file_absent(tmp_path):
    path = tmp_path / "module.py"
    path.write_text(SOURCE)
    assert method_in_file(path, "Backend.missing") is None
    assert method_in_file(path, "Back.plain") is None  # a prefix of a class name is not that class
    assert method_in_file(path, "Backend.coroutine") is None  # only plain ``def`` methods
    assert method_in_file(path, "Backend.f") is None  # the module-level f is outside the class


def test_function_source_matches_inspect(tmp_path, monkeypatch):
    import importlib

    from sglang_spec_plugins.engine.source_text import function_source

    (tmp_path / "cut_module.py").write_text(SOURCE.replace("class Backend(Base):", "class Backend:")
                                            + "\n\nclass Decorated:\n    @staticmethod\n    def g():\n        return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("cut_module")
    for owner, name in [("Backend", "plain"), ("Backend", "signature"), ("Text", "text"), ("Continued", "continued"),
                        ("Bracket", "bracket"), ("Text", "after")]:
        func = vars(getattr(module, owner))[name]
        got = function_source(func)
        if got is not None:  # None: left to inspect (Text.after: the class body is cut at a column-0 line)
            assert got == textwrap.dedent(inspect.getsource(func)), name
    assert function_source(vars(module.Backend)["plain"]) is not None
    assert function_source(module.Decorated.g) is None  # decorated: starts at the decorator, left to inspect
    assert function_source(module.f) == textwrap.dedent(inspect.getsource(module.f))  # a top-level function


PRUNED = '''
import x

LIMIT = 3


def names_it(draft_worker):
    return draft_worker.a


def does_not():
    return 1


class Holder:
    """Doc."""

    field = 1

    def reads(self):
        def inner():
            return self.draft_worker.b
        return inner

    @property
    def other(self):
        return 2

    def text(self):
        s = """
draft_worker in a string at column 0
"""
        return s
'''


def _functions(tree):
    return [(n.name, n.lineno, n.end_lineno, ast.dump(n)) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_pruned_module_keeps_the_functions_that_name_it_at_their_lines(tmp_path):
    import re

    from sglang_spec_plugins.engine.source_text import pruned_module

    path = tmp_path / "m.py"
    path.write_text(PRUNED.replace('        s = """\ndraft_worker in a string at column 0\n"""\n', "        s = ''\n"))
    full = {name: rest for name, *rest in _functions(ast.parse(path.read_text()))}
    pruned = pruned_module(path, re.compile(r"\bdraft_worker\b"))
    assert [n.name for n in pruned.body] == ["names_it", "Holder"]
    assert [n.name for n in pruned.body[1].body] == ["reads"]
    assert {name: rest for name, *rest in _functions(pruned)} == {k: full[k] for k in ("names_it", "reads", "inner")}


def test_pruned_module_parses_the_whole_file_where_a_cut_cannot_be_trusted(tmp_path):
    import re

    from sglang_spec_plugins.engine.source_text import pruned_module

    cases = {
        "a column-0 line of a string": PRUNED,
        "a class-level name": PRUNED.replace("    field = 1", "    draft_worker: int = 1"),
        "a module-level name": PRUNED.replace("LIMIT = 3", "LIMIT = draft_worker"),
        "a decorator": PRUNED.replace("    @property", "    @draft_worker.setter"),
        "a function under an if": PRUNED.replace("def does_not():\n    return 1", "if x:\n    def f():\n        return draft_worker"),
    }
    for name, source in cases.items():
        path = tmp_path / f"{len(name)}.py"
        path.write_text(source)
        assert ast.dump(pruned_module(path, re.compile(r"\bdraft_worker\b"))) == ast.dump(ast.parse(source)), name
