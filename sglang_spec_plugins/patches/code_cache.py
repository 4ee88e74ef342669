"""Compiled code of rebuilt SGLang functions, kept between processes.

A scheduler process rebuilds about a dozen SGLang functions from their edited
source (:mod:`.source_edit`): cutting each out of its file, editing and
compiling it. The code object depends only on the SGLang file, the function,
the edits, the compiler flags, the optimization level (``-O`` drops asserts),
the bytecode format and the modules that cut and compile, so :func:`compiled`
keeps it in a ``marshal`` file of the cache directory (:mod:`..cache_entries`)
keyed by all of them: the file by its size and modification time, as Python's
own bytecode cache judges a source (``how`` holds them, with what else the
caller's build depends on), the building modules likewise, and the Python
magic number. A hit skips the build; a file changed since is another key,
built from its text again (cut, every edit checked, compiled).

An entry holds its full key and a digest of its payload; one that is absent,
torn, of another key or another payload, or does not load as a code object is
built again and rewritten. Nothing here raises what building itself would not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import sys
import types
from typing import Any, Callable, Optional, Sequence

from ..cache_entries import cache_dir, file_stamp, write_file

FORMAT = b"sglang-spec-plugins code 2\n"
"""The start of every entry; a change of layout makes every older entry a miss."""

logger = logging.getLogger("sglang_spec_plugins")


def compiled(how: Any, builders: Sequence[str], build: Callable[[], types.CodeType],
             environ=os.environ) -> types.CodeType:
    """``build()``, or the code an earlier process built the same way: ``how``
    (data with a ``repr``: everything the build reads, the SGLang file by its
    size and modification time) and ``builders`` (the paths of the modules
    whose code builds it, judged by size and modification time) are the key,
    with the Python magic number and ``sys.flags.optimize``."""
    where = cache_dir(environ)
    if where is None:
        return build()
    key = hashlib.blake2b(repr([how, [file_stamp(b) for b in builders], importlib.util.MAGIC_NUMBER,
                                sys.flags.optimize]).encode("utf-8", "surrogatepass"), digest_size=20)
    path = where / f"code-{key.hexdigest()[:20]}.marshal"
    code = _read(path, key.digest())
    if code is None:
        code = build()
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
