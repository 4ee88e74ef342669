"""Entries kept between processes: where they live, and reading and writing one whole.

What a process computes from installed files only (the plugins installed,
what SGLang's source says) is kept in a JSON file in a per-user cache
directory, for the next process to take when the files are as they were
(:mod:`.installed`, :mod:`.engine.source_cache` say how each knows).

Where: ``$SGLANG_SPEC_PLUGINS_CACHE``, else ``$XDG_CACHE_HOME/sglang-spec-plugins``,
else ``~/.cache/sglang-spec-plugins``; ``SGLANG_SPEC_PLUGINS_CACHE=off``
turns it off (every process computes). Many processes of a server start at
once: each writes a file of its own in the directory and renames it over the
entry (atomic on POSIX), so a reader sees a whole entry or none. An entry
that cannot be read or decoded, or holds another key, is no entry; a
directory that cannot be written is skipped. Nothing here raises: the cache
can make a start faster, never stop one. Entries are JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Tuple

CACHE_ENV = "SGLANG_SPEC_PLUGINS_CACHE"
"""Environment variable: the cache directory, or ``off``."""

logger = logging.getLogger("sglang_spec_plugins")


def cache_dir(environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """The directory entries live in, or None when the cache is off."""
    named = environ.get(CACHE_ENV)
    if named:
        return None if named.lower() == "off" else Path(named)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "sglang-spec-plugins")


def file_stamp(path: str) -> Tuple[Optional[int], Optional[int]]:
    """(size, modification time in ns) of a file, or (None, None) where it is not there: how an
    entry judges that a file it depends on is as it was."""
    try:
        info = os.stat(path)
    except OSError:
        return None, None
    return info.st_size, info.st_mtime_ns


def digest(data: Any) -> str:
    """A short digest of JSON data (keys, fingerprints)."""
    return hashlib.blake2b(json.dumps(data).encode(), digest_size=20).hexdigest()


def read_entry(path: Path, key: str, fields: Iterable[str] = ("value",)) -> Optional[dict]:
    """The entry at ``path`` if it is whole, holds ``key`` and has ``fields``, else None."""
    try:
        entry = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # unreadable, or not JSON (a torn or foreign file)
        logger.debug("sglang-spec-plugins: cache entry %s not used: %s", path, exc)
        return None
    if not (isinstance(entry, dict) and entry.get("key") == key and set(fields) <= entry.keys()):
        logger.debug("sglang-spec-plugins: cache entry %s not used: another key or layout", path)
        return None
    return entry


def write_entry(path: Path, entry: dict) -> None:
    """Replace the entry at ``path`` atomically; skipped (logged at DEBUG) where it cannot be written."""
    write_file(path, json.dumps(entry).encode())


def write_file(path: Path, data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` atomically; skipped (logged at DEBUG) where it cannot be written."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_bytes(data)
        os.replace(scratch, path)
    except OSError as exc:
        logger.debug("sglang-spec-plugins: cache entry %s not written: %s", path, exc)
        try:
            scratch.unlink()
        except OSError:
            pass
