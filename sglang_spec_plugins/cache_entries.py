"""Entries kept between processes: where they live, whose they must be, reading and writing one whole.

What a process computes from installed files only (the plugins installed,
what SGLang's source says) is kept in a JSON file in a per-user cache
directory, for the next process to take when the files are as they were
(:mod:`.installed`, :mod:`.engine.source_cache` say how each knows).

Where: ``$SGLANG_SPEC_PLUGINS_CACHE``, else ``$XDG_CACHE_HOME/sglang-spec-plugins``,
else ``~/.cache/sglang-spec-plugins``; ``SGLANG_SPEC_PLUGINS_CACHE=off``
turns it off (every process computes).

Whose: the folder and every entry must be this process's user's (or root's)
and writable by nobody else (:mod:`.ownership`): the kept plans hold source
edits compiled into SGLang's functions. A folder that is not is not used at
all (nothing read or written there); an entry that is not, or a symbolic link
or anything but a regular file in an entry's place, is not used (computed
afresh, and replaced). Each is named in one warning per process, with why.
This process makes the folder (mode 0700) and its entries (0600) its own
whatever the umask.

Many processes of a server start at once: each writes a file of its own in
the directory and renames it over the entry (atomic on POSIX), so a reader
sees a whole entry or none. An entry that cannot be read or decoded, or
holds another key, is no entry; a directory that cannot be written is
skipped. Nothing here raises: the cache can make a start faster, never stop one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Set, Tuple

from .errors import shown_path
from .ownership import others_can_write

CACHE_ENV = "SGLANG_SPEC_PLUGINS_CACHE"
"""Environment variable: the cache directory, or ``off``."""

logger = logging.getLogger("sglang_spec_plugins")

_warned: Set[str] = set()
"""The folders and entries this process has warned about."""


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
    """The entry at ``path`` if it is whole, this user's (see the module doc), holds ``key`` and has ``fields``, else None."""
    if not _usable_folder(path.parent, make=False):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO does not block
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):  # O_NOFOLLOW refused it
            _warn(path, "entry", "a symbolic link, not a file this process wrote")
        else:
            logger.debug("sglang-spec-plugins: cache entry %s not used: %s", shown_path(path), exc)
        return None
    with open(fd, "rb") as file:
        info = os.fstat(file.fileno())
        why = others_can_write(info) if stat.S_ISREG(info.st_mode) else "not a regular file"
        if why:
            _warn(path, "entry", why)
            return None
        try:
            entry = json.loads(file.read())
        except (OSError, ValueError) as exc:  # unreadable, or not JSON (a torn or foreign file)
            logger.debug("sglang-spec-plugins: cache entry %s not used: %s", shown_path(path), exc)
            return None
    if not (isinstance(entry, dict) and entry.get("key") == key and set(fields) <= entry.keys()):
        logger.debug("sglang-spec-plugins: cache entry %s not used: another key or layout", shown_path(path))
        return None
    return entry


def write_entry(path: Path, entry: dict) -> None:
    """Replace the entry at ``path`` atomically with a file of this user's alone (mode 0600); skipped
    where the folder is not this user's alone, or cannot be written (logged at DEBUG)."""
    if not _usable_folder(path.parent, make=True):
        return
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as file:
            file.write(json.dumps(entry).encode())
        os.replace(scratch, path)
    except OSError as exc:
        logger.debug("sglang-spec-plugins: cache entry %s not written: %s", shown_path(path), exc)
        try:
            scratch.unlink()
        except OSError:
            pass


def _usable_folder(folder: Path, make: bool) -> bool:
    """Whether entries may be read from (and written to) ``folder``: it is a
    directory that is this user's alone; with ``make``, one made (mode 0700,
    its missing parents as the umask says) where there is none."""
    try:
        if make:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(folder)
    except OSError as exc:  # absent (nothing to read), or not to be made
        if make:
            logger.debug("sglang-spec-plugins: cache folder %s not used: %s", shown_path(folder), exc)
        return False
    why = others_can_write(info) if stat.S_ISDIR(info.st_mode) else "not a directory"
    if why:
        _warn(folder, "folder", why)
    return why is None


def _warn(path: Path, what: str, why: str) -> None:
    """One warning per process for the cache ``what`` (folder, entry) at ``path``."""
    if str(path) in _warned:
        return
    _warned.add(str(path))
    done = ("nothing is read or written there (make it this user's alone, or point "
            f"{CACHE_ENV} at a folder that is)" if what == "folder" else "computed afresh instead")
    logger.warning("sglang-spec-plugins: cache %s %s not used: %s; %s", what, shown_path(path), why, done)
