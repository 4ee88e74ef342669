"""Every member SGLang reads off a speculative worker, found in its source.

SGLang keeps the speculative worker as the scheduler's ``draft_worker`` (and
as its ``model_worker`` once speculation is on) and hands it to helpers as a
``draft_worker=`` / ``spec_worker=`` argument; its base class
``BaseSpecWorker`` reads its own ``self.draft_worker``. :func:`worker_reads`
parses each file of ``sglang/srt`` that names one of those (a text search
picks them: about 40 of 1,500 files) except the built-in workers' own
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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROOTS = ("self.draft_worker", "self.scheduler.draft_worker", "scheduler.draft_worker",
         "self.model_worker", "self.scheduler.model_worker")
"""Expressions that are the speculative worker (``model_worker`` is it
whenever an algorithm is set; what the scheduler reads there it reads on the
target worker too)."""

PARAMETERS = ("draft_worker", "spec_worker")
"""Parameter names SGLang's helpers take the speculative worker under."""

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

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def worker_reads(srt: Path) -> Tuple[WorkerRead, ...]:
    """The reads in the release whose ``sglang/srt`` folder is ``srt``, sorted by path and place."""
    found: List[WorkerRead] = []
    for path in sorted(srt.rglob("*.py")):
        rel = path.relative_to(srt).as_posix()
        if rel.startswith("speculative/") and rel != BASE_FILE:
            continue
        text = path.read_text(encoding="utf-8")
        if "draft_worker" not in text and "spec_worker" not in text and "model_worker" not in text:
            continue
        _Reader(rel, found).visit(ast.parse(text))
    return tuple(sorted(set(found), key=lambda r: (r.path, r.file, r.line)))


class _Reader(ast.NodeVisitor):
    """Walks one file, keeping the aliases of the worker in scope and whether
    the current branch is optional."""

    def __init__(self, rel: str, found: List[WorkerRead]):
        self.rel = rel
        self.found = found
        self.aliases: Dict[str, Path_] = {}
        self.optional = False
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
        self._branch(node.body, bool(ONE_ALGORITHM_FUNCTION.search(node.name)))
        self.aliases = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    # branches
    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        test = ast.unparse(node.test)
        negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
        specific = bool(ONE_ALGORITHM.search(test))
        self._branch(node.body, specific and not negated)
        self._branch(node.orelse, specific and negated)

    def _branch(self, body: Iterable[ast.stmt], optional: bool) -> None:
        outer, self.optional = self.optional, self.optional or optional
        for statement in body:
            self.visit(statement)
        self.optional = outer

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
        self.generic_visit(node)

    def _record(self, path: Path_, node: ast.AST, optional: bool) -> None:
        if not path or (self.in_base and path[0] != "draft_worker") or (self.in_base and len(path) < 2):
            return
        self.found.append(WorkerRead(".".join(path), self.rel, node.lineno, optional or self.optional))

    def _resolve(self, node: ast.AST) -> Optional[Tuple[Path_, bool]]:
        """(path from the worker, whether reaching it is optional) of an
        expression that denotes the worker or something read off it."""
        if isinstance(node, ast.Name):
            path = self.aliases.get(node.id)
            return None if path is None else (path, False)
        if isinstance(node, ast.Attribute):
            if not self.in_base and ast.unparse(node) in ROOTS:
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


def _is_getattr(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))
