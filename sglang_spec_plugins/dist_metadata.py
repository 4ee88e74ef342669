"""Fields of an installed distribution's metadata, read off the file's header block.

``Distribution.metadata`` (and ``.name``, ``.version``, ``metadata.version()``)
runs the email parser over the whole ``METADATA`` file, long description and
every ``Requires-Dist`` included: 1-2 ms for SGLang's, in every process SGLang
starts, and once per plugin. :func:`fields` reads the same values from the
header lines alone. It takes a field's first value, as ``metadata[name]``
does (the name compared case-insensitively, the value with its leading
blanks stripped), and falls back to the parser for anything it does not read
the same way: a wanted field folded over several lines, a line that is not a
field, no metadata file.
"""

from __future__ import annotations

from importlib import metadata
from typing import Optional, Tuple


def fields(dist: metadata.Distribution, *names: str) -> Tuple[Optional[str], ...]:
    """``dist.metadata[name]`` for each of ``names`` (None where absent)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    found = _header_fields(text, {n.lower() for n in names}) if text else None
    if found is None:
        parsed = dist.metadata
        return tuple(parsed[n] for n in names)
    return tuple(found.get(n.lower()) for n in names)


def _header_fields(text: str, wanted) -> Optional[dict]:
    """The first value of each ``wanted`` (lower-case) field in ``text``'s
    header block, or None where it cannot be read the parser's way. The
    lines after every wanted field's (the last one not folded) are not read:
    the parser takes a header line it cannot read for the end of the header
    block, which leaves the fields before as they are (SGLang's header holds
    ~300 ``Requires-Dist`` lines after its name and version)."""
    found: dict = {}
    taken = False  # whether the field before is one just taken
    for line in text.partition("\n\n")[0].split("\n"):
        if not line:  # the end of a file with no body
            break
        if line[:1] in (" ", "\t"):  # a continuation of the field before
            if taken:
                return None
            continue
        if len(found) == len(wanted):
            break
        name, colon, value = line.partition(":")
        if not (colon and name.isascii() and name.isprintable() and " " not in name):  # not a field to the parser
            return None
        taken = name.lower() in wanted and name.lower() not in found
        if taken:
            found[name.lower()] = value.lstrip(" \t")
    return found
