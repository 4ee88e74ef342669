"""The installed plugins' entry points, the installed files' scan kept between processes.

``importlib.metadata.entry_points(group=...)`` lists every ``sys.path``
folder and reads the ``entry_points.txt`` of every distribution there (about
200 where SGLang is installed), in every process SGLang starts, right after
SGLang has done so for its own group. :func:`plugin_entry_points` keeps which
distribution folders hold the plugin group (:mod:`.cache_entries`), keyed by
``sys.path``, with what the scan depended on, taken before it: each
``sys.path`` folder's inode, modification and change times (adding, removing
or renaming a name in a folder changes them: an install, an uninstall; Python's
own ``importlib.metadata`` trusts a folder's modification time the same way
within a process), each ``*.dist-info`` and ``*.egg-info`` folder's
``entry_points.txt`` by size and modification time (an edit in place), and a
file on ``sys.path`` (a zip) by its size and time. When all of it is as it
was, only the kept distributions are read, afresh (their entry points and
metadata, never from the cache); any difference, a kept distribution that is
gone, no longer holds the group or is not in a ``sys.path`` folder (where the
scan found it), or a finder of distributions other than Python's own on
``sys.meta_path``, makes it a scan.
"""

from __future__ import annotations

import importlib.machinery
import os
import stat
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

from .cache_entries import cache_dir, digest, file_stamp, read_entry, write_entry

FORMAT = 2
"""The layout of an entry; a change makes every older entry a miss."""

_FIELDS = ("folders", "infos", "value")


def plugin_entry_points(group: str, environ: Mapping[str, str] = os.environ) -> List[metadata.EntryPoint]:
    """``importlib.metadata.entry_points(group=group)``, the scan made only when
    the installed distributions may differ from an earlier process's (see the module doc)."""
    where = cache_dir(environ)
    if where is None or not _only_pythons_finder():
        return list(metadata.entry_points(group=group))
    key = digest([group, FORMAT, sys.path])
    path = where / f"plugin-distributions-{key[:20]}.json"
    folders = [_folder(entry) for entry in sys.path]
    entry = read_entry(path, key, _FIELDS)
    if entry is not None and entry["folders"] == folders and all(file_stamp(p) == (size, mtime) for p, size, mtime in entry["infos"]):
        kept = _read_kept(entry["value"], group)
        if kept is not None:
            return kept
    infos = [[p, *file_stamp(p)] for p in _entry_points_files(sys.path)]  # before the scan: a later change shows
    found = list(metadata.entry_points(group=group))
    holders = list(dict.fromkeys(_dist_folder(ep) for ep in found))
    if None not in holders:
        write_entry(path, {"key": key, "folders": folders, "infos": infos, "value": holders})
    return found


def _read_kept(folders: Sequence[str], group: str) -> Optional[List[metadata.EntryPoint]]:
    """The entry points in ``group`` of the distributions whose metadata folders
    are ``folders``, read now; None where one is gone or holds none, or is
    not where a scan finds distributions (in a ``sys.path`` folder)."""
    scanned = {os.path.normpath(entry or ".") for entry in sys.path}
    found: List[metadata.EntryPoint] = []
    for folder in folders:
        if not isinstance(folder, str) or os.path.normpath(os.path.dirname(folder) or ".") not in scanned:
            return None
        dist = metadata.PathDistribution(Path(folder))
        mine = [ep for ep in dist.entry_points if ep.group == group]
        if not mine:
            return None
        found.extend(mine)
    return found


def _dist_folder(ep: metadata.EntryPoint) -> Optional[str]:
    """The metadata folder of the distribution ``ep`` came from, or None (not
    from a folder: a zip, another finder's)."""
    dist = getattr(ep, "dist", None)
    folder = getattr(dist, "_path", None)  # PathDistribution's folder (no public name for it)
    return str(folder) if isinstance(folder, Path) and folder.is_dir() else None


def _folder(entry: str) -> List[Any]:
    """A ``sys.path`` entry as the key holds it: inode, modification and change
    time of a folder (size and time of a file); ``[]`` if absent."""
    try:
        info = os.stat(entry or ".")  # "" is the working directory
    except OSError:
        return []
    if stat.S_ISDIR(info.st_mode):
        return [info.st_ino, info.st_mtime_ns, info.st_ctime_ns]
    return [info.st_size, info.st_mtime_ns]


def _entry_points_files(paths: Sequence[str]) -> List[str]:
    """The ``entry_points.txt`` path of every metadata folder in the folders ``paths``."""
    found = []
    for entry in paths:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info")))
        except OSError:  # absent, or a file
            continue
        found.extend(os.path.join(entry or ".", name, "entry_points.txt") for name in names)
    return found


def _only_pythons_finder() -> bool:
    """Whether Python's path finder is the only finder of distributions (another one's are not fingerprinted)."""
    return all(getattr(finder, "find_distributions", None) is None or finder is importlib.machinery.PathFinder
               for finder in sys.meta_path)
