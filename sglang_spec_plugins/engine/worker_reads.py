"""Every member SGLang reads off a speculative worker, found in its source.

SGLang keeps the speculative worker as the scheduler's ``draft_worker`` (and
as its ``model_worker`` once speculation is on) and hands it to helpers as a
``draft_worker=`` / ``spec_worker=`` argument; its base class
``BaseSpecWorker`` reads its own ``self.draft_worker``. :func:`worker_reads`
parses each file of ``sglang/srt`` that names one of those (a text search
picks them: 17 of 2,141 files on 0.5.23) except the built-in workers' own
internals under ``speculative/``, follows local aliases
(``dw = getattr(w, "draft_worker", None)``, ``worker = w or self.tp_worker``,
``runner = w.draft_worker.draft_runner``) and records each read as a dotted
path from the worker, e.g. ``draft_worker.draft_runner.token_to_kv_pool``.

A read is *optional* when SGLang tolerates its absence (``getattr`` with a
default, ``hasattr``) or makes it only for one built-in algorithm or feature
(inside an ``if`` on ``spec_algorithm.is_eagle()``, on an EAGLE/DFlash/DSpark/
NGRAM-only server argument, on ``hasattr``; see :data:`ONE_ALGORITHM`) or
in a function named for one (:data:`ONE_ALGORITHM_FUNCTION`).
Nothing is imported.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .source_cache import SourceFile
from .source_text import pruned_module

ROOTS = ("self.draft_worker", "self.scheduler.draft_worker", "scheduler.draft_worker",
         "self.model_worker", "self.scheduler.model_worker")
"""Expressions that are the speculative worker (``model_worker`` is it
whenever an algorithm is set; what the scheduler reads there it reads on the
target worker too)."""

PARAMETERS = ("draft_worker", "spec_worker")
"""Parameter names SGLang's helpers take the speculative worker under."""

NAMES = re.compile(r"_worker\b(?:(?<=\bdraft_worker)|(?<=\bspec_worker)|(?<=\bmodel_worker))")
"""What a read starts from, as a whole word (``is_draft_worker`` does not match; a match is its ``_worker``):
a file and a function without it hold none. Literal first: ``\b(?:draft_worker|...)\b`` makes ``re`` try
every position of a file, 15 times slower over SGLang's 2,100 files."""

_NAMES_IN_BYTES = re.compile(NAMES.pattern.encode())

BASE_FILE = "speculative/base_spec_worker.py"
BASE_CLASS = "BaseSpecWorker"

ONE_ALGORITHM = re.compile(
    r"\.is_(?!none\b)\w+\(\)|hasattr\(|eagle|dflash|dspark|ngram|carries_draft_hidden_states"
    r"|confidence_relay|draft_url"
)
"""A test that, when true, means one built-in algorithm or an optional feature
(reads in its body are optional; in the ``else`` of its negation too)."""

ONE_ALGORITHM_FUNCTION = re.compile(r"eagle|dflash|dspark|ngram")
"""A function named for one built-in algorithm (``_apply_dspark_budget_frac``):
its reads are optional."""

Path_ = Tuple[str, ...]


@dataclass(frozen=True)
class WorkerRead:
    """One read: the dotted ``path`` from the speculative worker, where (file
    relative to ``sglang/srt``, line), and whether SGLang can do without it."""

    path: str
    file: str
    line: int
    optional: bool
    checked: Tuple[str, ...] = ()
    """Shorter paths SGLang has found not None where it reads this one
    (``if w.draft_worker is not None: w.draft_worker.x``): None there is fine."""
    called: bool = False
    """SGLang calls what it reads there (``w.init_cuda_graphs()``)."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def worker_reads(files: Sequence[SourceFile]) -> Tuple[WorkerRead, ...]:
    """The reads in the release whose ``sglang/srt`` files are ``files`` (as
    :func:`.source_cache.python_files` lists them), sorted by path and place."""
    found: List[WorkerRead] = []
    for rel, path, _, _ in files:
        if rel.startswith("speculative/") and rel != BASE_FILE:
            continue
        with open(path, "rb") as file:  # searched undecoded: most files are not read further
            data = file.read()
        if _NAMES_IN_BYTES.search(data):
            _Reader(rel, found).visit(pruned_module(Path(path), NAMES))
    return tuple(sorted(set(found), key=lambda r: (r.path, r.file, r.line)))


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """The syntax tree of an SGLang source file (parsed once per process)."""
    return ast.parse(path.read_text(encoding="utf-8"))


class _Reader(ast.NodeVisitor):
    """Walks one file, keeping the aliases of the worker in scope and whether
    the current branch is optional."""

    def __init__(self, rel: str, found: List[WorkerRead]):
        self.rel = rel
        self.found = found
        self.aliases: Dict[str, Path_] = {}
        self.optional = False
        self.not_none: frozenset = frozenset()  # paths known not None here
        self.in_base = False  # inside BaseSpecWorker: ``self`` is the worker

    # scopes
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.rel == BASE_FILE and node.name != BASE_CLASS:
            return
        outer, self.in_base = self.in_base, self.rel == BASE_FILE
        self.generic_visit(node)
        self.in_base = outer

    def visit_FunctionDef(self, node) -> None:
        outer = dict(self.aliases)
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
            if arg.arg in PARAMETERS and self.rel != BASE_FILE:
                self.aliases[arg.arg] = ()
            else:
                self.aliases.pop(arg.arg, None)
        if self.in_base:
            self.aliases["self"] = ()
        outer_checked, self.not_none = self.not_none, frozenset()
        self._branch(node.body, bool(ONE_ALGORITHM_FUNCTION.search(node.name)))
        self.aliases, self.not_none = outer, outer_checked

    visit_AsyncFunctionDef = visit_FunctionDef

    # branches
    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        test = ast.unparse(node.test)
        negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
        specific = bool(ONE_ALGORITHM.search(test))
        self._branch(node.body, specific and not negated, self._tested(node.test, positive=True))
        self._branch(node.orelse, specific and negated, self._tested(node.test, positive=False))

    def _branch(self, body: Iterable[ast.stmt], optional: bool, not_none: frozenset = frozenset()) -> None:
        outer, self.optional = self.optional, self.optional or optional
        outer_checked, self.not_none = self.not_none, self.not_none | not_none
        for statement in body:
            self.visit(statement)
            if isinstance(statement, ast.If) and statement.body and isinstance(
                    statement.body[-1], (ast.Return, ast.Raise, ast.Continue)) and not statement.orelse:
                self.not_none |= self._tested(statement.test, positive=False)  # ``if w is None: return``
        self.optional, self.not_none = outer, outer_checked

    def _tested(self, test: ast.expr, positive: bool) -> frozenset:
        """Paths a test shows not None when it is true (``positive``) or false."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And if positive else ast.Or):
            return frozenset().union(*(self._tested(value, positive) for value in test.values))
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._tested(test.operand, not positive)
        subject = None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None:
            if isinstance(test.ops[0], ast.IsNot if positive else ast.Is):
                subject = test.left
        elif positive and isinstance(test, ast.Call) and ast.unparse(test.func) == "isinstance":
            subject = test.args[0]
        elif positive:
            subject = test
        resolved = self._resolve(subject) if subject is not None else None
        return frozenset({".".join(resolved[0])}) if resolved is not None and resolved[0] else frozenset()

    # aliases
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            resolved = self._resolve(node.value)
            if resolved is None:
                self.aliases.pop(node.targets[0].id, None)
            else:
                self.aliases[node.targets[0].id] = resolved[0]

    # reads
    def visit_Attribute(self, node: ast.Attribute) -> None:
        resolved = self._resolve(node)
        if resolved is not None and resolved[0]:
            path = resolved[0] if isinstance(node.ctx, ast.Load) else resolved[0][:-1]
            self._record(path, node, resolved[1])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_getattr(node):
            resolved = self._resolve(node)
            if resolved is not None:
                self._record(resolved[0], node, resolved[1])
        elif isinstance(node.func, ast.Attribute):  # ``w.init_cuda_graphs()``: a read that is called
            resolved = self._resolve(node.func)
            if resolved is not None and resolved[0]:
                self._record(resolved[0], node.func, resolved[1], called=True)
                for child in (node.func.value, *node.args, *node.keywords):
                    self.visit(child)
                return
        self.generic_visit(node)

    def _record(self, path: Path_, node: ast.AST, optional: bool, called: bool = False) -> None:
        if not path or (self.in_base and path[0] != "draft_worker") or (self.in_base and len(path) < 2):
            return
        joined = ".".join(path)
        checked = tuple(sorted(p for p in self.not_none if joined.startswith(p + ".")))
        self.found.append(WorkerRead(joined, self.rel, node.lineno, optional or self.optional, checked, called))

    def _resolve(self, node: ast.AST) -> Optional[Tuple[Path_, bool]]:
        """(path from the worker, whether reaching it is optional) of an
        expression that denotes the worker or something read off it."""
        if isinstance(node, ast.Name):
            path = self.aliases.get(node.id)
            return None if path is None else (path, False)
        if isinstance(node, ast.Attribute):
            if not self.in_base and _dotted(node) in ROOTS:
                return (), False
            inner = self._resolve(node.value)
            return None if inner is None else (inner[0] + (node.attr,), inner[1])
        if isinstance(node, ast.Call) and _is_getattr(node):
            inner = self._resolve(node.args[0])
            tolerant = node.func.id == "hasattr" or len(node.args) > 2
            return None if inner is None else (inner[0] + (node.args[1].value,), inner[1] or tolerant)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return self._resolve(node.values[0])
        if isinstance(node, ast.Subscript):
            inner = self._resolve(node.value)
            return None if inner is None or not inner[0] else (
                inner[0][:-1] + (f"{inner[0][-1]}[{ast.unparse(node.slice)}]",), inner[1])
        return None


def _dotted(node: ast.expr) -> Optional[str]:
    """``a.b.c`` of a chain of attributes on a name, else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(names)]) if isinstance(node, ast.Name) else None


def _is_getattr(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))
