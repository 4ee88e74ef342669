"""plugins.toml: which drafter plugins and algorithms are on, and their settings.

The file is found through ``SGLANG_SPEC_PLUGINS_CONFIG`` (which must then
name an existing file), else ``./plugins.toml``; with neither, the defaults
apply (every installed plugin enabled, ``on_error = "fail"``, every offered
algorithm enabled with no settings). A file another user could have written
(:mod:`.ownership`) is refused, or read with a warning where
``SGLANG_SPEC_PLUGINS_CONFIG_PERMISSIONS=warn`` says so.

Parsing checks everything that can be checked without knowing which plugins
are installed; every problem found is reported at once, each line naming the
file actually read (where a symbolic link leads), the table and the key, with
every name :func:`~.errors.printable`. Cross-checks against the installed plugins live
in :mod:`sglang_spec_plugins.plugins`.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, List, Mapping, NamedTuple, Optional, Tuple

from .errors import ConfigError, closest, is_plain_int, printable, shown_path
from .ownership import others_can_write

if TYPE_CHECKING:  # imported where a table has the key
    from .widths_by_acceptance import AcceptanceSettings
    from .widths_by_batch_size import WidthsByBatchSize

CONFIG_ENV = "SGLANG_SPEC_PLUGINS_CONFIG"
"""Environment variable naming the plugins.toml to use."""

PERMISSIONS_ENV = "SGLANG_SPEC_PLUGINS_CONFIG_PERMISSIONS"
"""Environment variable: what a plugins.toml another user could have written
gets: ``refuse`` (unset: the default) or ``warn`` (read, with a warning). Not
a key of the file: whoever can write the file would set it."""

PERMISSIONS_CHOICES = ("refuse", "warn")

logger = logging.getLogger("sglang_spec_plugins")

DEFAULT_FILENAME = "plugins.toml"

ON_ERROR_CHOICES = ("fail", "skip")

RESERVED_ALGORITHM_NAMES = frozenset(
    {
        "DFLASH",
        "DSPARK",
        "EAGLE",
        "EAGLE3",
        "FROZEN_KV_MTP",
        "NEXTN",
        "NGRAM",
        "NONE",
        "STANDALONE",
        "UNO",
    }
)
"""Names SGLang 0.5.12-0.5.23 keep for built-in algorithms (enum members and
the NEXTN alias). The engine probe reads the installed release's own set;
a test keeps this union a superset of it."""

DEFAULT_MAX_FAULTED_STEPS = 8
"""Decode steps in which a drafter's code may fault before its worker switches it off, unless plugins.toml says."""

FRAMEWORK_ALGORITHM_KEYS = ("plugin", "enabled", "max_tokens_per_req", "widths_by_batch_size", "widths_by_acceptance",
                            "max_faulted_steps")
"""Keys of an ``[algorithms.NAME]`` table read by the framework; every other
key is a plugin setting."""

MAX_TOKENS_PER_REQ_LIMIT = 1024
"""The largest ``max_tokens_per_req`` accepted. It becomes the maximum verify
width, by which SGLang (0.5.19+ through ``max_speculative_num_draft_tokens``)
sizes KV reservation, CUDA-graph capture and per-step buffers (batch size x
width tokens): a value far above any drafter's block (16-64 today) only
reserves memory, and a huge one overflows those sizes."""

_PLUGINS_KEYS = ("enable", "disable", "on_error")

MAX_NESTING = 32
"""The deepest nesting of arrays and tables plugins.toml may use."""

def valid_algorithm_name(name: Any) -> bool:
    """An algorithm name is ASCII: a letter, then letters, digits or ``_``
    (it becomes a command-line value and a Python attribute in SGLang)."""
    return isinstance(name, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) is not None


_NOTHING: Mapping[str, Any] = MappingProxyType({})
"""An empty read-only mapping (the default of the mappings below)."""


class AlgorithmConfig(NamedTuple):
    """One ``[algorithms.NAME]`` table.

    ``plugin``: the entry-point name of the plugin that must serve it (needed
    only when two installed plugins offer the same name). ``enabled``: False
    keeps it from being registered. ``max_tokens_per_req``: the operator's
    ceiling on the verify width. ``widths_by_batch_size``: the operator's widths
    per batch-size bucket (used instead of the plugin's
    ``sgl_spec_widths_by_batch_size``). ``widths_by_acceptance``: the built-in
    acceptance controller's settings, None when it is off
    (:mod:`.widths_by_acceptance`). ``max_faulted_steps``: the decode steps in
    which the drafter's code may fault (raise, or answer wrongly) before the
    worker switches it off for the process and serves without drafts (None: the
    default, :data:`DEFAULT_MAX_FAULTED_STEPS`). ``settings``: every other
    key, read-only, handed to the plugin's hooks.
    """

    name: str
    plugin: Optional[str] = None
    enabled: bool = True
    max_tokens_per_req: Optional[int] = None
    settings: Mapping[str, Any] = _NOTHING
    widths_by_batch_size: Optional[WidthsByBatchSize] = None
    widths_by_acceptance: Optional[AcceptanceSettings] = None
    max_faulted_steps: Optional[int] = None


class Config(NamedTuple):
    """The whole of plugins.toml, validated and immutable.

    ``source`` is the file it came from (None: built-in defaults).
    ``enable`` None means every installed plugin.
    """

    source: Optional[Path] = None
    enable: Optional[Tuple[str, ...]] = None
    disable: Tuple[str, ...] = ()
    on_error: str = "fail"
    algorithms: Mapping[str, AlgorithmConfig] = _NOTHING

    @property
    def origin(self) -> str:
        """How messages name this config: the file read (:func:`~.errors.shown_path`), or the defaults."""
        return shown_path(self.source) if self.source else "(built-in defaults)"

    def as_plain(self) -> Mapping[str, Any]:
        """The settings as plain JSON-able data (no file path): equal files give equal data."""
        return {
            "enable": plain(self.enable),
            "disable": plain(self.disable),
            "on_error": self.on_error,
            "algorithms": {
                name: {"plugin": a.plugin, "enabled": a.enabled, "max_tokens_per_req": a.max_tokens_per_req,
                       "widths_by_batch_size": a.widths_by_batch_size.as_plain() if a.widths_by_batch_size else None,
                       "widths_by_acceptance": a.widths_by_acceptance.as_plain() if a.widths_by_acceptance else None,
                       "max_faulted_steps": a.max_faulted_steps, "settings": plain(a.settings)}
                for name, a in sorted(self.algorithms.items())
            },
        }

    def algorithm(self, name: str) -> AlgorithmConfig:
        """The table for ``name`` (any case), or the defaults if there is none."""
        upper = name.upper()
        return self.algorithms.get(upper) or AlgorithmConfig(name=upper)


def locate(cwd: Optional[Path] = None, environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Return the plugins.toml to use, or None when there is none.

    Raises ConfigError when ``SGLANG_SPEC_PLUGINS_CONFIG`` names anything but
    a readable regular file, and when ``./plugins.toml`` exists but is not a
    regular file (a directory, a dangling symlink): an operator's file that
    is silently ignored would enable every installed plugin.
    """
    named = environ.get(CONFIG_ENV)
    if named:
        return regular_file(Path(named), f"{CONFIG_ENV}={printable(named)}", missing_ok=False)
    try:
        local = (cwd or Path.cwd()) / DEFAULT_FILENAME
    except OSError as exc:
        raise ConfigError([f"./{DEFAULT_FILENAME}: cannot resolve the working directory: {_os_reason(exc)}"]) from None
    return regular_file(local, printable(local), missing_ok=True)


def regular_file(path: Path, what: str, missing_ok: bool) -> Optional[Path]:
    """``path`` if it is (or links to) a regular file; None if it is missing
    and ``missing_ok``; otherwise a ConfigError saying what it is instead,
    named by ``what``. Nothing is opened, so a FIFO is never read."""
    try:
        if path.is_file():
            return path
        link = f"a symlink to {os.readlink(path)!r}, which " if path.is_symlink() else ""
        if path.exists():
            kind = file_kind(path.stat().st_mode)
            raise ConfigError([f"{what}: {link + 'is' if link else 'not a regular file:'} {kind}; plugins.toml must be a regular file"])
        if link:
            raise ConfigError([f"{what}: {link}does not exist"])
    except OSError as exc:
        raise ConfigError([f"{what}: cannot be read: {_os_reason(exc)}"]) from None
    if missing_ok:
        return None
    raise ConfigError([f"{what}: no such file"])


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a file of another kind"


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def load(path: Optional[Path] = None, *, environ: Mapping[str, str] = os.environ) -> Config:
    """Read and validate the config at ``path`` (default: :func:`locate`).

    Every failure, whatever its cause (unreadable file, one another user could
    have written, bytes that are not UTF-8, invalid or absurdly nested TOML,
    wrong keys), is a ConfigError naming the file read and, where there is
    one, the position.
    """
    permissions = environ.get(PERMISSIONS_ENV) or "refuse"
    if permissions not in PERMISSIONS_CHOICES:
        raise ConfigError([f"{PERMISSIONS_ENV}={printable(repr(permissions))}: expected 'refuse' or 'warn'"])
    if path is None:
        path = locate(environ=environ)
        if path is None:
            return Config()
    shown = shown_path(path)
    try:
        with open(path, "rb") as file:  # judged by what was opened, not by a name that may change meanwhile
            unsafe = others_can_write(os.fstat(file.fileno()))
            data = file.read()
    except OSError as exc:
        raise ConfigError([f"{shown}: cannot read: {_os_reason(exc)}"]) from None
    if unsafe:
        what = (f"{shown}: {unsafe}: another user could choose the plugins and algorithms this server runs")
        if permissions == "refuse":
            raise ConfigError([f"{what}; make it the server user's alone (chown, chmod go-w), or set "
                               f"{PERMISSIONS_ENV}=warn to read it anyway"])
        logger.warning("sglang-spec-plugins: %s; read anyway (%s=warn)", what, PERMISSIONS_ENV)
    return parse(decode(data, shown), source=Path(path))


def decode(data: bytes, where: str) -> Mapping[str, Any]:
    """The TOML document in ``data`` (UTF-8, a leading byte-order mark
    allowed), ``where`` naming the file in messages. A document nested deeper
    than :data:`MAX_NESTING` is refused, before it is parsed where a key has
    more parts or arrays and tables open deeper than that (:func:`_deepest`:
    the parser's time or memory grows with the square of a key's parts)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        read = exc.object  # the bytes after a byte-order mark
        line = read[: exc.start].count(b"\n") + 1
        column = exc.start - (read.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError([f"{where}: not UTF-8 text: byte 0x{read[exc.start]:02x} at line {line}, column {column}"]) from None
    too_deep = ConfigError([f"{where}: arrays or tables nested more than {MAX_NESTING} levels deep"])
    if _deepest(text) > MAX_NESTING:
        raise too_deep
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        end = f"(at end of document, line {text.count(chr(10)) + 1})"
        raise ConfigError([f"{where}: not valid TOML: {str(exc).replace('(at end of document)', end)}"]) from None
    if _depth(document) > MAX_NESTING:
        raise too_deep
    return document


_STRING_OR_COMMENT = re.compile(r'"""(?:\\[\s\S]|[^"\\]|"(?!""))*"""(?:"{0,2})'
                                r"|'''(?:[^']|'(?!''))*'''(?:'{0,2})"
                                r'|"(?:\\.|[^"\\\n])*"'
                                r"|'[^'\n]*'"
                                r"|#[^\n]*")
"""A TOML string (multi-line first) or comment, as the parser reads them."""


def _deepest(text: str) -> int:
    """In linear time, without parsing: the most parts of any dotted key
    (table headers included) and the deepest arrays and inline tables open,
    whichever is more (strings and comments left out). Either is at most the
    document's depth (:func:`_depth`), but for a bare value's one dot
    (``1.5``, a time): a count above :data:`MAX_NESTING` is a key's or the
    brackets'."""
    skeleton = _STRING_OR_COMMENT.sub(lambda m: "" if m.group().startswith("#") else "s", text)
    parts = max(piece.count(".") for piece in re.split(r"[=,\[\]{}\n]", skeleton)) + 1
    open_now = deepest = 0
    for bracket in re.findall(r"[\[\]{}]", skeleton):
        open_now = open_now + 1 if bracket in "[{" else max(open_now - 1, 0)
        deepest = max(deepest, open_now)
    return max(parts, deepest)


def _depth(value: Any) -> int:
    """How many arrays/tables deep ``value`` goes (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in children)
    return deepest


def parse(raw: Mapping[str, Any], *, source: Optional[Path] = None) -> Config:
    """Validate a decoded plugins.toml; raise ConfigError listing every problem."""
    where = shown_path(source) if source else "plugins.toml"
    problems: List[str] = []

    for key in raw:
        if key not in ("plugins", "algorithms"):
            problems.append(f"{where}: unknown top-level key {key!r} (expected [plugins] and [algorithms.NAME] tables)")

    plugins_table = raw.get("plugins", {})
    enable: Optional[Tuple[str, ...]] = None
    disable: Tuple[str, ...] = ()
    on_error = "fail"
    if not isinstance(plugins_table, dict):
        problems.append(f"{where}: [plugins] must be a table")
    else:
        for key in plugins_table:
            if key not in _PLUGINS_KEYS:
                problems.append(f"{where}: [plugins] unknown key {key!r} (known: {', '.join(_PLUGINS_KEYS)})")
        if "enable" in plugins_table:
            enable = _names(plugins_table["enable"], f"{where}: [plugins] enable", problems)
        if "disable" in plugins_table:
            disable = _names(plugins_table["disable"], f"{where}: [plugins] disable", problems) or ()
        if "on_error" in plugins_table:
            on_error = plugins_table["on_error"]
            if on_error not in ON_ERROR_CHOICES:
                problems.append(f"{where}: [plugins] on_error must be one of {', '.join(map(repr, ON_ERROR_CHOICES))}, got {on_error!r}")
        for both in sorted(set(enable or ()) & set(disable)):
            problems.append(f"{where}: [plugins] plugin {both!r} is in both enable and disable")

    algorithms = {}
    algorithms_table = raw.get("algorithms", {})
    if not isinstance(algorithms_table, dict):
        problems.append(f"{where}: [algorithms] must be a table of [algorithms.NAME] tables")
        algorithms_table = {}
    for name, table in algorithms_table.items():
        parsed = _algorithm(name, table, where, problems)
        if parsed is None:
            continue
        if parsed.name in algorithms:
            problems.append(f"{where}: [algorithms.{printable(name)}] names the same algorithm as another table (names are case-insensitive)")
            continue
        algorithms[parsed.name] = parsed

    config = Config(
        source=source,
        enable=enable,
        disable=disable,
        on_error=on_error if on_error in ON_ERROR_CHOICES else "fail",
        algorithms=MappingProxyType(algorithms),
    )
    if problems:
        raise ConfigError(problems, partial=config)
    return config


def _names(value: Any, what: str, problems: List[str]) -> Optional[Tuple[str, ...]]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{what} must be a list of plugin names (strings), got {value!r}")
        return None
    return tuple(value)


def _algorithm(name: str, table: Any, where: str, problems: List[str]) -> Optional[AlgorithmConfig]:
    label = f"{where}: [algorithms.{printable(name)}]"
    if not isinstance(table, dict):
        problems.append(f"{label} must be a table")
        return None
    upper = name.upper()
    count = len(problems)
    if not valid_algorithm_name(name):
        problems.append(f"{label} is not a valid algorithm name (ASCII letters, digits and _, starting with a letter)")
    elif upper in RESERVED_ALGORITHM_NAMES:
        problems.append(f"{label} {upper!r} is a built-in SGLang algorithm name; plugins cannot configure or replace it")
    plugin = table.get("plugin")
    if plugin is not None and not (isinstance(plugin, str) and plugin):
        problems.append(f"{label} plugin must be a plugin name (string), got {plugin!r}")
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append(f"{label} enabled must be true or false, got {enabled!r}")
    cap = table.get("max_tokens_per_req")
    if cap is not None and (not is_plain_int(cap) or cap < 1):
        problems.append(f"{label} max_tokens_per_req must be a positive integer, got {cap!r}")
    elif cap is not None and cap > MAX_TOKENS_PER_REQ_LIMIT:
        problems.append(f"{label} max_tokens_per_req = {cap} is above {MAX_TOKENS_PER_REQ_LIMIT}, the largest verify width "
                        "accepted (SGLang sizes KV reservation and CUDA graphs by it)")
    widths = None
    if "widths_by_batch_size" in table:
        from .widths_by_batch_size import WidthsByBatchSize, WidthsByBatchSizeError  # only a table that has the key

        try:
            widths = WidthsByBatchSize.parse(table["widths_by_batch_size"])
        except WidthsByBatchSizeError as exc:
            problems.append(f"{label} widths_by_batch_size: {exc} (write widths_by_batch_size = "
                            "{1 = 16, 8 = 8, 64 = 4}: from each batch size on, that many tokens per request)")
    acceptance = None
    if "widths_by_acceptance" in table:
        from .widths_by_acceptance import AcceptanceSettings, WidthsByAcceptanceError  # only a table that has the key

        try:
            acceptance = AcceptanceSettings.parse(table["widths_by_acceptance"])
        except WidthsByAcceptanceError as exc:
            problems.append(f"{label} widths_by_acceptance: {exc} (write widths_by_acceptance = true, or a table such as "
                            "{interval_steps = 4, margin = 0.03})")
    faults = table.get("max_faulted_steps")
    if faults is not None and (not is_plain_int(faults) or faults < 0):
        problems.append(f"{label} max_faulted_steps must be an integer >= 0 (0: switch the drafter off at its first "
                        f"fault), got {faults!r}")
    if "verify_widths" in table:
        problems.append(f"{label} 'verify_widths' is not a key; widths per batch size are "
                        "widths_by_batch_size = {1 = 16, 8 = 8, 64 = 4}")
    for key in table:
        near = None if key in FRAMEWORK_ALGORITHM_KEYS else _framework_key_near(key)
        if near:
            problems.append(f"{label} {key!r} looks like a misspelling of the framework key {near!r}; "
                            "rename it (a plugin setting may not look like a framework key)")
    if len(problems) > count:
        return None
    settings = {k: _freeze(v) for k, v in table.items() if k not in FRAMEWORK_ALGORITHM_KEYS}
    return AlgorithmConfig(
        name=upper,
        plugin=plugin,
        enabled=enabled,
        max_tokens_per_req=cap,
        settings=MappingProxyType(settings),
        widths_by_batch_size=widths,
        widths_by_acceptance=acceptance,
        max_faulted_steps=faults,
    )


def _framework_key_near(key: str) -> Optional[str]:
    """The framework key ``key`` is probably meant to be, else None: a close
    spelling (``max_token_per_req``), another case or camelCase
    (``MAX_TOKENS_PER_REQ``, ``maxTokensPerReq``), or a shortening
    (``max_tokens``). Taken as a setting, it would silently not apply."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower().replace("-", "_")
    for candidate in (key, snake):
        near = closest(candidate, FRAMEWORK_ALGORITHM_KEYS, cutoff=0.8)  # closer than a hint: it refuses the key
        if near:
            return near[0]
    return next((k for k in FRAMEWORK_ALGORITHM_KEYS if len(snake) >= 6 and k != snake and k.startswith(snake)), None)


def plain(value: Any) -> Any:
    """A frozen value back as plain data (mappings -> dicts, tuples -> lists)."""
    if hasattr(value, "items"):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def _freeze(value: Any) -> Any:
    """Make a decoded TOML value read-only (tables -> mapping proxies, arrays -> tuples)."""
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
