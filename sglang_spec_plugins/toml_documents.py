"""plugins.toml documents kept between processes, keyed by the file's text.

Every process SGLang starts reads the same plugins.toml, and importing the
TOML parser (``tomllib`` compiles its regular expressions) costs more than
reading the file. :func:`loads` keeps the document a text decodes to as
JSON in the cache directory (:mod:`.cache_entries`), keyed by the whole text
and the Python build whose ``tomllib`` parsed it, and gives it to the next
process that reads the same text; the document is then validated as a parsed
one is. A text that does not parse is never kept (its error comes from the
parser in every process), nor is a document JSON does not give back equal
(a date or a time, a NaN); with the cache off, or on Python 3.10 (``tomli``,
whose release is not in the key), every process parses.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Mapping

from .cache_entries import cache_dir, digest, read_entry, write_entry

FORMAT = 1
"""The layout of an entry; a change makes every older entry a miss."""


class TOMLError(ValueError):
    """The text is not valid TOML (the parser's message)."""


def loads(text: str, environ: Mapping[str, str] = os.environ) -> Any:
    """The TOML document ``text`` decodes to. Raises TOMLError, or RecursionError
    for a document nested deeper than the parser recurses."""
    where = cache_dir(environ) if sys.version_info >= (3, 11) else None
    if where is None:
        return _parse(text)
    key = digest(["toml", FORMAT, sys.version, text])
    path = where / f"toml-{key[:20]}.json"
    entry = read_entry(path, key)
    if entry is not None and isinstance(entry["value"], dict):
        return entry["value"]
    document = _parse(text)
    try:
        exact = json.loads(json.dumps(document)) == document
    except (TypeError, ValueError, RecursionError):  # a date or a time; nested too deep for json
        exact = False
    if exact:
        write_entry(path, {"key": key, "value": document})
    return document


def _parse(text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TOMLError(str(exc)) from None

