"""Files another user could have written, as plugins.toml and the cache judge them.

A file or folder is this process's to trust when it is owned by the user the
process runs as, or by root (who can change anything anyway), and nobody else
may write it: not others, nor a group with anyone but its owner in it, as
OpenSSH judges ``authorized_keys`` (Debian's, which accepts a user-private
group: the owner's own primary group, with no other member, what a umask of
002 makes every file writable by). Anything else could hold what another user
wrote: plugins.toml decides which third-party code runs inside the server, the
cache holds the source edits compiled into SGLang's functions.
"""

from __future__ import annotations

import os
import stat
from typing import Optional


def others_can_write(info: os.stat_result) -> Optional[str]:
    """Why another user could have written what ``info`` describes
    (``owned by uid 1001, ...``, ``writable by group 100 (mode 0664)``), or None."""
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        return f"owned by uid {info.st_uid}, neither this process's user (uid {me}) nor root"
    group = bool(info.st_mode & stat.S_IWGRP) and not _owners_own_group(info)
    writers = [who for who, writes in ((f"group {info.st_gid}", group), ("others", info.st_mode & stat.S_IWOTH)) if writes]
    if writers:
        return f"writable by {' and '.join(writers)} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _owners_own_group(info: os.stat_result) -> bool:
    """Whether the file's group is its owner's user-private group: the owner's
    primary group, listing no other member (unknown owner or group: no)."""
    import grp
    import pwd

    try:
        owner, group = pwd.getpwuid(info.st_uid), grp.getgrgid(info.st_gid)
    except KeyError:
        return False
    return owner.pw_gid == info.st_gid and set(group.gr_mem) <= {owner.pw_name}
