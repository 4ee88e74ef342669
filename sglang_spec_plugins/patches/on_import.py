"""Run a callback right after a module is first imported.

Patching a module means importing it, and SGLang's runner and attention
packages take seconds to import: a launcher or detokenizer process that never
builds a model should not pay that. :func:`after_import` runs ``callback(module)``
at once if the module is already imported, else right after the module's own
code has run on its first import (an import-system finder wraps its loader).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable, Dict, List


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.waiting: Dict[str, List[Callable]] = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.waiting:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, self.waiting.pop(fullname))
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, callbacks: List[Callable]):
        self.inner, self.callbacks = inner, callbacks

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        for callback in self.callbacks:
            callback(module)

    def __getattr__(self, name):  # get_source, get_filename, ... (inspect, tracebacks)
        return getattr(self.inner, name)


_finder = _Finder()


def after_import(module_name: str, callback: Callable) -> None:
    """Call ``callback(module)`` now if ``module_name`` is imported, else after its import."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    _finder.waiting.setdefault(module_name, []).append(callback)


def cancel(module_name: str, callback: Callable) -> None:
    """Forget a callback that has not run yet."""
    callbacks = _finder.waiting.get(module_name, [])
    if callback in callbacks:
        callbacks.remove(callback)
    if not callbacks:
        _finder.waiting.pop(module_name, None)
