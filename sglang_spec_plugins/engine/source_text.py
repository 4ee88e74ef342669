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
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
from pathlib import Path
from typing import Optional, Tuple

_LEAVES_CLASS = re.compile(r"\n[^\s#)]")  # a top-level line: the class body ended before it
_CODE_LINE = re.compile(r"\n([ \t]*)[^\s#)\]}]")  # a line that can end a block (not blank, comment, closer)


@functools.lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return "\n" + path.read_text(encoding="utf-8")


_TOP_LEVEL_CODE = re.compile(r"\n[^\s#)\]}]")  # a column-0 line that is not a comment or a closing bracket


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
    """What ``textwrap.dedent(inspect.getsource(func))`` gives for a method
    defined directly in a top-level class of its file, found as above and
    accepted only when it starts at the function's first line (a decorated or
    nested function, or a file changed since, gives None: ask ``inspect``)."""
    code = getattr(func, "__code__", None)
    if code is None or getattr(func, "__qualname__", "").count(".") != 1 or not Path(code.co_filename).is_file():
        return None
    found = _method(Path(code.co_filename), func.__qualname__)
    return found[1] if found is not None and found[0] == code.co_firstlineno else None


def _method(path: Path, qualname: str) -> Optional[Tuple[int, str]]:
    """(line number of the ``def``, dedented source) of ``Class.method`` in the file at ``path``."""
    text = _text(path)
    owner_name, _, attr = qualname.rpartition(".")
    owner = _line_starting(text, f"class {owner_name}", 0, len(text), lambda after: not (after.isalnum() or after == "_"))
    if owner is None:
        return None
    body_end = _LEAVES_CLASS.search(text, owner + 1)
    define = _line_starting(text, f"def {attr}(", owner, body_end.start() if body_end else len(text), indented=True)
    if define is None:
        return None
    start = text.rfind("\n", 0, define) + 1
    indent = define - start
    end = next((m.start() for m in _CODE_LINE.finditer(text, text.find("\n", define)) if len(m.group(1)) <= indent), len(text))
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
