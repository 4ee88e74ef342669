"""Compiled code of rebuilt SGLang functions, kept between processes.

A scheduler process rebuilds about a dozen SGLang functions from their edited
source (:mod:`.source_edit`); compiling that text is most of the rebuild.
The code object depends only on the text, the file name, the compiler flags,
the optimization level (``-O`` drops asserts) and the bytecode format, so
:func:`compiled` keeps it, as Python's own bytecode cache does, in a
``marshal`` file of the cache directory (:mod:`..cache_entries`) keyed by all
of them, the Python magic number for the last, and by the file of the module
that builds the code (``how`` says which).

The text is still cut, edited and checked in every process: only compiling
it is skipped. An entry holds its full key and a digest of its payload; one
that is absent, torn, of another key or another payload, or does not load as
a code object is compiled again and rewritten. Nothing here raises what
compiling itself would not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import sys
import types
from typing import Any, Callable, Optional

from ..cache_entries import cache_dir, file_stamp, write_file

FORMAT = b"sglang-spec-plugins code 1\n"
"""The start of every entry; a change of layout makes every older entry a miss."""

logger = logging.getLogger("sglang_spec_plugins")


def compiled(text: str, how: Any, builder: str, compile_text: Callable[[], types.CodeType],
             environ=os.environ) -> types.CodeType:
    """``compile_text()`` (which compiles ``text``), or the code an earlier
    process compiled from the same ``text`` the same way: ``how`` (JSON-like
    data: the file name, the flags, ...) and ``builder`` (the path of the
    module whose code compiles it, judged by size and modification time) are
    part of the key, with the Python magic number and ``sys.flags.optimize``."""
    where = cache_dir(environ)
    if where is None:
        return compile_text()
    key = hashlib.blake2b(repr([how, file_stamp(builder), importlib.util.MAGIC_NUMBER, sys.flags.optimize]).encode(),
                          digest_size=20)
    key.update(text.encode("utf-8", "surrogatepass"))
    path = where / f"code-{key.hexdigest()[:20]}.marshal"
    code = _read(path, key.digest())
    if code is None:
        code = compile_text()
        payload = marshal.dumps(code)
        write_file(path, FORMAT + key.digest() + hashlib.blake2b(payload, digest_size=20).digest() + payload)
    return code


def _read(path, key: bytes) -> Optional[types.CodeType]:
    """The code kept at ``path`` under ``key``, or None (see the module doc)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.debug("sglang-spec-plugins: cache entry %s not used: %s", path, exc)
        return None
    head = len(FORMAT)
    payload = data[head + 40:]
    if (data[:head] != FORMAT or data[head:head + 20] != key
            or data[head + 20:head + 40] != hashlib.blake2b(payload, digest_size=20).digest()):
        logger.debug("sglang-spec-plugins: cache entry %s not used: another key, layout or payload", path)
        return None
    try:
        code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError) as exc:
        logger.debug("sglang-spec-plugins: cache entry %s not used: %s", path, exc)
        return None
    return code if isinstance(code, types.CodeType) else None
