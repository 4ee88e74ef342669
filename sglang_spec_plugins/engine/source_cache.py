"""What is read off the installed SGLang's source, kept between processes.

Reading the worker contract off SGLang's source means searching all ~2,100
files of ``sglang/srt`` and parsing a dozen of them: about a second, in every
process that resolves server arguments; planning the patches reads about
fifteen methods out of a dozen files in every process SGLang starts. Each
answer depends only on those files and on the code that reads them, so
:func:`cached` (every ``.py`` file under a folder) and :func:`cached_reading`
(the files one computation read or looked for, recorded by
:func:`.source_text.recording`) keep it in a JSON file in a per-user cache
directory and give it back to the next process.

Key: the content of every ``.py`` file under the folder read, this package's
reading modules (each by size and modification time, as Python's bytecode
cache judges a source file) and the Python release (whose ``ast`` is read).
An entry records each file's size and modification time, as Python's
bytecode cache does: when they all match, the entry is taken without reading
the files (about 20 ms for ``sglang/srt``). When any differs (a reinstall,
an edit), the files are read and hashed, and an entry whose content digest
is the same is still taken (its times refreshed); any other is computed
again, with the digest recorded. (The first entry, written where there was
none, skips the digest: it would cost as much as a second reading of every
file; a later change of times computes it.)

Where entries live and how they are written: :mod:`..cache_entries`. An
entry that cannot be read or decoded, or holds another key, is computed
again. Nothing here raises: the cache can make a start faster, never stop one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar

from ..cache_entries import CACHE_ENV, cache_dir, digest, file_stamp, read_entry, write_entry
from ..errors import printable, shown_path

__all__ = ["CACHE_ENV", "cache_dir", "cached", "cached_reading", "python_files"]

FORMAT = 1
"""The layout of an entry; a change makes every older entry a miss."""

_FIELDS = ("times", "content", "value")

T = TypeVar("T")
SourceFile = Tuple[str, str, Optional[int], Optional[int]]
"""(path relative to the folder read, path, size, modification time in ns); size None: absent."""

logger = logging.getLogger("sglang_spec_plugins")


def python_files(root: Path) -> List[SourceFile]:
    """Every ``.py`` file under ``root``, sorted by relative path (one
    directory scan, no ``Path`` per file: ``Path.rglob`` takes twice as long;
    ``__pycache__`` folders, which hold none, are not entered)."""
    found: List[SourceFile] = []
    pending = [(str(root), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir():
                if entry.name != "__pycache__":
                    pending.append((entry.path, f"{prefix}{entry.name}/"))
            elif entry.name.endswith(".py") and entry.is_file():
                stat = entry.stat()
                found.append((prefix + entry.name, entry.path, stat.st_size, stat.st_mtime_ns))
    found.sort()
    return found


def cached(kind: str, root: Path, reader: Sequence[ModuleType], compute: Callable[[List[SourceFile]], T],
           encode: Callable[[T], Any], decode: Callable[[Any], T], environ=os.environ) -> T:
    """``compute(files)`` (``files``: :func:`python_files` of ``root``, listed
    once), or what an earlier process computed for the same ``.py`` files under
    ``root`` and the same ``reader`` modules (see the module doc). ``encode``
    turns the value into JSON data, ``decode`` back; a ``decode`` that raises
    makes the entry a miss."""
    where = cache_dir(environ)
    files = python_files(root)
    if where is None:
        return compute(files)
    key = digest([kind, str(root), FORMAT, list(sys.version_info[:2]), *(_module_text(m) for m in reader)])
    path = where / f"{kind}-{key[:20]}.json"
    times = digest([[rel, size, mtime] for rel, _, size, mtime in files])
    entry = read_entry(path, key, _FIELDS)
    if entry is not None and entry["times"] == times:
        value = _decoded(entry, decode, path)
        if value is not None:
            return value[0]
    content = None if entry is None else _content_digest(files)
    if content is not None and entry["content"] == content:
        value = _decoded(entry, decode, path)
        if value is not None:
            write_entry(path, {**entry, "times": times})
            return value[0]
    value = compute(files)
    write_entry(path, {"key": key, "times": times, "content": content, "value": encode(value)})
    return value


def cached_reading(kind: str, key: Any, reader: Sequence[ModuleType], compute: Callable[[], T],
                   encode: Callable[[T], Any], decode: Callable[[Any], T], environ=os.environ) -> T:
    """``compute()``, or what an earlier process computed with the same
    ``key`` (JSON data: a release, ...) and ``reader`` modules when every file
    it read or looked for (:func:`.source_text.recording` around it) is as it
    was then: the same size and modification time, or the same content
    (absent files stay absent). ``encode``/``decode`` as for :func:`cached`."""
    where = cache_dir(environ)
    if where is None:
        return compute()
    full_key = digest([kind, key, FORMAT, list(sys.version_info[:2]), *(_module_text(m) for m in reader)])
    path = where / f"{kind}-{full_key[:20]}.json"
    entry = read_entry(path, full_key, _FIELDS)
    if entry is not None:
        files = [(name, name, *file_stamp(name)) for name in entry.get("paths", ())]
        times = digest([[name, size, mtime] for name, _, size, mtime in files])
        same = entry["times"] == times or entry["content"] == _content_digest(files)
        value = _decoded(entry, decode, path) if same else None
        if value is not None:
            if entry["times"] != times:
                write_entry(path, {**entry, "times": times})
            return value[0]
    from .source_text import recording  # not at import: a process taking every entry cuts no source

    with recording() as read:
        value = compute()
    try:
        encoded = encode(value)
    except Exception as exc:  # a value the entry cannot hold: computed, not kept
        logger.debug("sglang-spec-plugins: cache entry %s not written: %s: %s", shown_path(path), type(exc).__name__, printable(exc))
        return value
    files = [(name, name, *file_stamp(name)) for name in sorted(read)]
    write_entry(path, {"key": full_key, "paths": sorted(read), "content": _content_digest(files),
                  "times": digest([[name, size, mtime] for name, _, size, mtime in files]), "value": encoded})
    return value


def _module_text(module: ModuleType) -> List[Any]:
    """A reading module as the key holds it: its file, size and modification
    time (how Python's own bytecode cache judges a source file)."""
    return [module.__name__, *file_stamp(module.__file__)]


def _content_digest(files: Iterable[SourceFile]) -> str:
    """A digest of every file's relative path and bytes (a file that cannot
    be read counts as its error)."""
    digest = hashlib.blake2b(digest_size=20)
    for rel, path, size, _ in files:
        if size is None:  # looked for and absent
            digest.update(f"{rel}\0absent\0".encode())
            continue
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError as exc:
            data = f"unreadable: {exc}".encode()
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _decoded(entry: dict, decode: Callable[[Any], T], path: Path) -> Optional[Tuple[T]]:
    try:
        return (decode(entry["value"]),)
    except Exception as exc:  # an entry written by hand or by a bug: compute instead
        logger.debug("sglang-spec-plugins: cache entry %s not used: %s: %s", shown_path(path), type(exc).__name__, printable(exc))
        return None
