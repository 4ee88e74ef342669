"""How large the installed SGLang makes flashinfer's workspace, read off its source.

SGLang allocates the float workspace every flashinfer wrapper plans into from
one environment variable, an ``EnvInt`` of ``sglang/srt/environ.py``'s
``Envs`` (``SGLANG_FLASHINFER_WORKSPACE_SIZE``, 384 MiB by default on
0.5.12-0.5.23). ``FlashInferAttnBackend.__init__`` then overwrites the
variable for some model architectures (Qwen2/Qwen3 and others: 512 MiB,
whatever the operator set) and for deterministic inference (2 GiB, and no
split KV in graphs, so the verify takes no split-KV buffers). Both are read
from the files with ``ast``, nothing is imported; what they say is kept
between processes (:func:`.source_cache.cached_reading`, keyed by the files
read), so a server's start-up check does not parse ``environ.py`` again.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

from . import probe, source_text
from .probe import method_source, source_file
from .source_cache import cached_reading


@dataclass(frozen=True)
class WorkspaceSetting:
    """``env``: the variable's name; ``default``: its default in bytes;
    ``forced``: architecture -> the size the backend sets for it."""

    env: str
    default: int
    forced: Dict[str, int] = field(default_factory=dict)

    def size(self, architectures: Sequence[str], environ: Mapping[str, str] = os.environ) -> Optional[Tuple[int, str, bool]]:
        """``(bytes, where it comes from, whether the variable sets it)`` the
        backend allocates for a model of ``architectures``; None where the
        variable does not parse as an integer (SGLang fails on it itself)."""
        for arch in architectures:
            if arch in self.forced:
                return self.forced[arch], f"set by SGLang's flashinfer backend for {arch}, whatever {self.env} says", False
        value = environ.get(self.env)
        if value is None:
            return self.default, f"{self.env} is not set: SGLang's default", True
        try:
            return int(value), f"{self.env}={value}", True
        except ValueError:
            return None


@functools.lru_cache(maxsize=None)
def workspace_setting() -> Optional[WorkspaceSetting]:
    """The installed release's setting, or None where its source does not say it as described above."""
    return cached_reading("flashinfer-workspace", [], [sys.modules[__name__], probe, source_text], _read_setting,
                          lambda found: None if found is None else [found.env, found.default, found.forced],
                          lambda data: None if data is None else WorkspaceSetting(data[0], data[1], dict(data[2])))


def _read_setting() -> Optional[WorkspaceSetting]:
    path = source_file("sglang.srt.environ")
    if path is None:
        return None
    found = None
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.endswith("FLASHINFER_WORKSPACE_SIZE") and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "EnvInt" and len(node.value.args) == 1):
            default = _constant(node.value.args[0])
            if default is not None:
                found = (node.targets[0].id, default)
                break
    if found is None:
        return None
    return WorkspaceSetting(found[0], found[1], _forced(found[0]))


def _forced(env: str) -> Dict[str, int]:
    """Architecture -> size of each ``if <architectures test>: envs.<env>.set(N)`` in the backend's ``__init__``."""
    source = method_source("sglang.srt.layers.attention.flashinfer_backend", "FlashInferAttnBackend.__init__")
    forced: Dict[str, int] = {}
    if source is None:
        return forced
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if not isinstance(node, ast.If) or "architectures" not in ast.dump(node.test):
            continue
        for statement in node.body:
            call = statement.value if isinstance(statement, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "set"
                    and isinstance(call.func.value, ast.Attribute) and call.func.value.attr == env and call.args):
                size = _constant(call.args[0])
                names = [c.value for c in ast.walk(node.test) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if size is not None:
                    forced.update(dict.fromkeys(names, size))
    return forced


def _constant(node: ast.AST) -> Optional[int]:
    """An integer literal or a product of them (``384 * 1024 * 1024``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = _constant(node.left), _constant(node.right)
        return None if left is None or right is None else left * right
    return None
