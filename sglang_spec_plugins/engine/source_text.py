"""A method's source, cut out of its module's text without importing or tokenizing it.

Planning the patches reads about fifteen SGLang methods out of files of up to
220 kB at every process start. ``inspect.getblock`` (a pure-Python tokenizer
run over each method) and a per-line regex made that ~70 ms of the loader's
start-up; this module finds the class, the method and the method's end with
searches that run in C.

The method ends at the first line indented no deeper than its ``def`` that is
not blank, a comment or a closing bracket (how black formats a multi-line
signature). That cut is wrong only inside a multi-line string, a backslash
continuation or an open bracket; a block showing any sign of those (an odd
count of triple quotes, a trailing backslash, unbalanced brackets) is checked
with ``ast.parse`` and, if the cut was wrong, found by ``inspect.getblock``.
The class body ends at its first line at column 0 that is not a comment or a
closing bracket, as before this module: a method defined after such a line (a
column-0 line of a multi-line string) is not found, and its patch refuses.

:func:`pruned_module` uses the same cuts to parse only the functions of a file
that can hold a name (reading what SGLang does with a speculative worker
parses a dozen of the 6,400-line scheduler's functions, not the file).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import re
import textwrap
from bisect import bisect_right
from pathlib import Path
from typing import Iterator, List, Optional, Pattern, Set, Tuple

_LEAVES_CLASS = re.compile(r"\n[^\s#)]")  # a top-level line: the class body ended before it
_CODE_LINE = re.compile(r"\n([ \t]*)[^\s#)\]}]")  # a line that can end a block (not blank, comment, closer)


@functools.lru_cache(maxsize=None)
def _block_end(indent: int) -> Pattern[str]:
    """A line that can end a block (as ``_CODE_LINE``) indented no deeper than ``indent``: one search in C."""
    return re.compile(r"\n[ \t]{0,%d}[^\s#)\]}]" % indent)


_recorders: List[Set[str]] = []


@contextlib.contextmanager
def recording() -> Iterator[Set[str]]:
    """The paths of the SGLang files read (through this module, cached or
    not) or looked for (:func:`note`) inside the block, for keys of what
    depends on them (:func:`.source_cache.cached_reading`)."""
    paths: Set[str] = set()
    _recorders.append(paths)
    try:
        yield paths
    finally:
        _recorders.remove(paths)


def note(path: Path) -> None:
    """Count ``path`` as read by every :func:`recording` block open now (a
    file looked for counts whether it exists or not: its absence is read too)."""
    for paths in _recorders:
        paths.add(str(path))


def _text(path: Path) -> str:
    note(path)
    return _read(path)


@functools.lru_cache(maxsize=None)
def _read(path: Path) -> str:
    return "\n" + path.read_text(encoding="utf-8")


_TOP_LEVEL_CODE = re.compile(r"\n[^\s#)\]}]")  # a column-0 line that is not a comment or a closing bracket
_DEF = re.compile(r"\n([ \t]*)(?:async[ \t]+)?def[ \t]")
_CLASS = re.compile(r"class[ \t]+(\w+)")


def function_in_file(path: Path, name: str) -> Optional[str]:
    """The source of the top-level (undecorated) function ``name`` in ``path``:
    from its ``def`` to the next column-0 line that is not a comment or a
    closing bracket; None if absent. A column-0 line inside a multi-line
    string would cut it short, and a plan reading it would then refuse
    rather than guess."""
    text = _text(path)
    start = text.find(f"\ndef {name}(")
    if start == -1:
        return None
    end = _TOP_LEVEL_CODE.search(text, start + 1)
    return text[start + 1:end.start() if end else len(text)].rstrip() + "\n"


def method_in_file(path: Path, qualname: str) -> Optional[str]:
    """The dedented source of ``Class.method`` defined directly in a top-level
    class of the file at ``path``; None when there is no such method."""
    found = _method(path, qualname)
    return None if found is None else found[1]


def function_source(func) -> Optional[str]:
    """What ``textwrap.dedent(inspect.getsource(func))`` gives for a top-level
    function or a method defined directly in a top-level class of its file,
    found as above and accepted only when it starts at the function's first
    line (a decorated or nested function, or a file changed since, gives None:
    ask ``inspect``)."""
    code = getattr(func, "__code__", None)
    if code is None or getattr(func, "__qualname__", "").count(".") > 1 or not Path(code.co_filename).is_file():
        return None
    found = _method(Path(code.co_filename), func.__qualname__)
    return found[1] if found is not None and found[0] == code.co_firstlineno else None


def _method(path: Path, qualname: str) -> Optional[Tuple[int, str]]:
    """(line number of the ``def``, dedented source) of ``Class.method``, or of
    the column-0 ``def`` of the function ``qualname``, in the file at ``path``."""
    text = _text(path)
    owner_name, _, attr = qualname.rpartition(".")
    if owner_name:
        owner = _line_starting(text, f"class {owner_name}", 0, len(text), lambda after: not (after.isalnum() or after == "_"))
        if owner is None:
            return None
        body_end = _LEAVES_CLASS.search(text, owner + 1)
        define = _line_starting(text, f"def {attr}(", owner, body_end.start() if body_end else len(text), indented=True)
    else:
        define = _line_starting(text, f"def {attr}(", 0, len(text))
    if define is None:
        return None
    start = text.rfind("\n", 0, define) + 1
    indent = define - start
    ends = _block_end(indent).search(text, text.find("\n", define))
    end = ends.start() if ends else len(text)
    lines = text[start:end + 1].splitlines(keepends=True)
    while lines and (not lines[-1].strip() or _is_outer_comment(lines[-1], indent)):
        lines.pop()  # trailing blank lines and outer comments belong to no block
    block = "".join(lines)
    if _may_be_cut_short(block):
        try:
            ast.parse(textwrap.dedent(block))
        except SyntaxError:
            lines = inspect.getblock(text[start:].splitlines(keepends=True))
    return text.count("\n", 0, start), _dedent(lines, indent)


def _line_starting(text: str, head: str, begin: int, stop: int, accept=None, indented: bool = False) -> Optional[int]:
    """The offset of the first ``head`` in ``text[begin:stop]`` that a line starts
    with (after whitespace when ``indented``, at column 0 otherwise) and whose
    next character passes ``accept``; None if there is none."""
    at = text.find(head, begin, stop)
    while at != -1:
        line_start = text.rfind("\n", 0, at) + 1
        margin = text[line_start:at]
        if (margin.isspace() if indented else not margin) and (accept is None or accept(text[at + len(head):at + len(head) + 1])):
            return at
        at = text.find(head, at + 1, stop)
    return None


def _is_outer_comment(line: str, indent: int) -> bool:
    stripped = line.lstrip()
    return stripped.startswith("#") and len(line) - len(stripped) <= indent


def _may_be_cut_short(block: str) -> bool:
    return (block.count('"""') % 2 or block.count("'''") % 2 or "\\\n" in block
            or any(block.count(a) != block.count(b) for a, b in ("()", "[]", "{}")))


def _dedent(lines, indent: int) -> str:
    prefix = lines[0][:indent]
    if all(line.startswith(prefix) or not line.strip() for line in lines):
        return "".join(line[indent:] if line.strip() else line.lstrip(" \t") for line in lines)
    return textwrap.dedent("".join(lines))


Block = Tuple[int, int, int, Optional[str]]
"""(offset of the ``\\n`` before its ``def``, offset where it ends, indentation, class or None)."""


@functools.lru_cache(maxsize=None)
def pruned_module(path: Path, pattern: Pattern[str]) -> ast.Module:
    """The syntax tree of the file at ``path`` with only the functions that can
    hold a match of ``pattern``: each column-0 function and each method
    defined directly in a column-0 class whose text matches, parsed on its own
    at its own line numbers (methods inside a ``ClassDef`` of their class's
    name, with no other members, decorators or bases). An analysis that only
    looks inside functions naming something finds in it what it finds in the
    whole tree, in the same breadth-first order. A match outside those
    functions (module or class level, a decorator, a function under an
    ``if``), or a cut that does not parse as one function, gives the whole
    file's tree instead (cached per process)."""
    text = _text(path)
    hits = [m.start() for m in pattern.finditer(text)]
    blocks = _blocks(text)
    starts = [block[0] for block in blocks]
    kept: dict = {}
    for hit in hits:
        at = bisect_right(starts, hit) - 1
        if at < 0 or hit >= blocks[at][1]:
            return _whole_module(path)  # a match no cut function holds
        kept[at] = blocks[at]
    body: List[ast.stmt] = []
    for start, end, indent, owner in (kept[at] for at in sorted(kept)):
        lines = text[start + 1:end].splitlines(keepends=True)
        above = "\n" * (text.count("\n", 0, start + 1) - 1)  # parsed at its own line numbers
        try:
            tree = ast.parse(above + (_dedent(lines, indent) if indent else "".join(lines)))
        except SyntaxError:
            return _whole_module(path)
        if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return _whole_module(path)
        func = tree.body[0]
        if owner is None:
            body.append(func)
        elif body and isinstance(body[-1], ast.ClassDef) and body[-1].name == owner:
            body[-1].body.append(func)
        else:
            body.append(ast.ClassDef(name=owner, bases=[], keywords=[], body=[func], decorator_list=[],
                                     lineno=func.lineno, col_offset=0))
    return ast.Module(body=body, type_ignores=[])


@functools.lru_cache(maxsize=None)
def _whole_module(path: Path) -> ast.Module:
    """The syntax tree of the whole file (parsed once per process, for every pattern that needs it)."""
    return ast.parse(_text(path)[1:])  # text[0] is the added newline


def _blocks(text: str) -> List[Block]:
    """Every column-0 ``def`` and every ``def`` at the body indentation of a
    column-0 class, in file order; a ``def`` runs to the next line that can
    end it (see the module doc)."""
    tops = [m.start() for m in _TOP_LEVEL_CODE.finditer(text)] + [len(text)]
    found: List[Block] = []
    for start, stop in zip(tops, tops[1:]):
        line = text[start + 1:start + 200]
        if line.startswith(("def ", "def\t", "async ")):
            if _DEF.match(text, start):
                found.append((start, stop, 0, None))
            continue
        named = _CLASS.match(line)
        body = _CODE_LINE.search(text, text.find("\n", start + 1), stop) if named else None
        if body is None:
            continue
        indent = len(body.group(1))
        for define in _DEF.finditer(text, start + 1, stop):
            if len(define.group(1)) != indent:
                continue
            ends = _block_end(indent).search(text, text.find("\n", define.start() + 1), stop)
            end = ends.start() if ends else stop
            found.append((define.start(), end, indent, named.group(1)))
    return found
