"""Line-exact edits of an SGLang function, applied by rebuilding it from source.

An :class:`Edit` replaces one statement line of a function (matched after
stripping indentation, exactly once) with another, keeping the indentation.
An edit also names the *fixed markers*: text whose presence in the function
means upstream already does the right thing. Classifying a function against
an edit gives one of three states:

* ``"broken"``: the old line is there; the edit applies;
* ``"fixed"``: the old line is absent and a fixed marker is present;
* ``"unknown"``: neither; the function has a shape we do not know, and the
  patch must refuse rather than guess.

:func:`rebuild` compiles the edited source with the function's own module
globals, its original file name and line numbers (tracebacks point at the
real file), and a ``__class__`` cell so zero-argument ``super()`` still works.
Every process rebuilds the functions it patches from the installed source.
"""

from __future__ import annotations

import __future__
import ast
import functools
import inspect
import textwrap
import types
from typing import Callable, NamedTuple, Sequence, Tuple



class Edit(NamedTuple):
    """Replace the statement line ``old`` with ``new`` (both without indentation):
    the one such line, or with ``every`` each of them (at least one)."""

    old: str
    new: str
    fixed_markers: Tuple[str, ...]
    why: str
    every: bool = False

    def classify(self, source: str) -> str:
        hits = sum(line.strip() == self.old for line in source.splitlines())
        if hits == 1 or (self.every and hits > 1):
            return "broken"
        if self.old not in source and any(marker in source for marker in self.fixed_markers):
            return "fixed"
        return "unknown"


def source_of(func: Callable) -> str:
    """The function's dedented source (a top-level function or a method is cut out of its file's text
    without tokenizing it: ``engine.source_text``)."""
    from ..engine.source_text import function_source

    return function_source(func) or textwrap.dedent(inspect.getsource(func))


def rebuild(func: types.FunctionType, owner: type, edits: Sequence[Edit]) -> types.FunctionType:
    """Return a copy of ``func`` (a method of ``owner``) with ``edits`` applied.

    Raises ValueError if an edit's old line is not there exactly once, or if
    the function cannot be rebuilt faithfully (decorators, closures).
    """
    code = func.__code__
    if set(code.co_freevars) - {"__class__"}:
        raise ValueError(f"{func.__qualname__} closes over {code.co_freevars}; cannot rebuild it")
    # Compiled under the original function's __future__ flags (e.g. postponed annotations, which SGLang's
    # runners rely on for names imported only under TYPE_CHECKING), not this module's.
    futures = sum(f.compiler_flag for f in map(functools.partial(getattr, __future__), __future__.all_feature_names)
                  if code.co_flags & f.compiler_flag)
    factory = "__class__" in code.co_freevars  # zero-argument super(): defined inside a factory giving the cell
    namespace: dict = {}
    exec(_edited_code(func, edits, futures, factory), func.__globals__, namespace)
    new = namespace["_factory"](owner) if factory else namespace[func.__name__]
    new.__qualname__ = func.__qualname__
    new.__doc__ = func.__doc__
    new.__dict__.update(func.__dict__)
    return new


def _edited_code(func: types.FunctionType, edits: Sequence[Edit], futures: int, factory: bool) -> types.CodeType:
    """The code of a module defining ``func`` with ``edits`` applied to its source (in a
    ``_factory(__class__)`` with ``factory``), at the function's own line numbers."""
    lines = source_of(func).splitlines(keepends=True)
    for edit in edits:
        hits = [i for i, line in enumerate(lines) if line.strip() == edit.old]
        if len(hits) != 1 and not (edit.every and hits):
            raise ValueError(f"{func.__qualname__}: expected the line {edit.old!r} once, found it {len(hits)} times")
        for hit in hits:
            indent = lines[hit][: len(lines[hit]) - len(lines[hit].lstrip())]
            lines[hit] = f"{indent}{edit.new}\n"
    padded = "\n" * (func.__code__.co_firstlineno - 1) + "".join(lines)  # blank lines before it
    filename = func.__code__.co_filename
    if factory:
        return _factory_code(func, ast.parse(padded), futures)
    if not lines[0].startswith("def "):
        raise ValueError(f"{func.__qualname__}: only undecorated plain functions can be rebuilt")
    return compile(padded, filename, "exec", flags=futures, dont_inherit=True)  # from its text: half a tree's time


def _factory_code(func: types.FunctionType, tree: ast.Module, futures: int) -> types.CodeType:
    """A module defining ``_factory(__class__)``, which defines the function ``tree`` defines and returns it."""
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef) or node.decorator_list:
        raise ValueError(f"{func.__qualname__}: only undecorated plain functions can be rebuilt")
    factory = ast.FunctionDef(
        name="_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="__class__")], vararg=None, kwonlyargs=[],
                           kw_defaults=[], kwarg=None, defaults=[]),
        body=[node, ast.Return(value=ast.Name(id=node.name, ctx=ast.Load()))],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    for new_node in (factory, *factory.args.args, factory.body[1], factory.body[1].value):
        ast.copy_location(new_node, node)
    return compile(ast.Module(body=[factory], type_ignores=[]), func.__code__.co_filename, "exec", flags=futures,
                   dont_inherit=True)
