"""The processes of one SGLang server agree on the fingerprint and every answer that shapes a step, or stop.

SGLang runs the loader in the launcher and in every process it spawns (one
scheduler per TP/PP rank, each DP replica, the detokenizer, the DP
controller). The first of them to load (the launcher) creates a directory,
records its fingerprint there and names the directory in
``$SGLANG_SPEC_PLUGINS_AGREEMENT``, which every process it spawns inherits.
Each later process compares its fingerprint with the recorded one
(:func:`join`), and each :class:`Answer` (an algorithm's maximum width, width
and widths by batch size, per num_draft_tokens and worker), when a process
first resolves it, is recorded or compared with the one recorded first
(:func:`agree`). A difference stops that process before it loads weights,
naming both values and both processes.

The directory: one record per file, written whole (a hard link to a complete
file), ``fingerprint.json`` and ``answer.<digest of what it answers>.json``
(an algorithm name may be as long as a file name may not), each a JSON object
with ``answer``, ``value`` and the recording ``process``, ``pid`` and
``started`` (its start time, so that a pid used again by another process is
told apart). The first process records, before its fingerprint, what the
fingerprint digests (:data:`INPUTS`), so that a process whose fingerprint
differs is told what differs (a plugin installed or upgraded while the ranks
start, another plugins.toml). The directory it makes is named after it (pid
and start time): one that is gone while that process, an ancestor, still runs
was removed under the server, and a process that would otherwise agree with
nobody is refused. What a machine may hold there instead stops the process with an
:class:`AgreementError` naming the path and what to remove or set: a path
that is not a directory, a directory it cannot write, a file that is not a
record (empty, truncated, of another shape, a directory in its place), a
record by a process no longer running (an earlier server's, in a reused
directory), a fingerprint recorded by a running process this one does not
descend from (two servers sharing one directory).

What it covers: the processes one launcher spawns, on its node (the
directory is node-local). Ranks on other nodes are spawned by their own
launcher and agree among themselves; compare the fingerprint each node logs.
``check`` reads an agreement named in its environment (:func:`compare`) but
records nothing.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from .config import file_kind
from .errors import SpecPluginError, printable

logger = logging.getLogger("sglang_spec_plugins")

AGREEMENT_ENV = "SGLANG_SPEC_PLUGINS_AGREEMENT"
"""Environment variable: the directory where this server's processes record their fingerprint and answers."""

FINGERPRINT = "fingerprint"
"""The answer ``fingerprint.json`` records."""

INPUTS = "fingerprint inputs"
"""The answer whose record holds what a fingerprint digests (:func:`~.fingerprint.fingerprint_data`), so
that a process whose fingerprint differs is told what differs."""

RECORD_KEYS = ("answer", "value", "process", "pid", "started")

PREFIX = "sglang-spec-plugins-"
"""How the directory a server's first process makes is named: then its pid and start time (``-None``
where it cannot be read), so that one gone while that process runs is told from an earlier server's."""


class AgreementError(SpecPluginError):
    """The agreement directory cannot be used as it is (see the module doc)."""


class DisagreementError(AgreementError):
    """Two processes of one server resolved different fingerprints or answers."""


class Answer(NamedTuple):
    """One answer that shapes a step, as processes compare it: ``key`` is what
    it answers (``"SBD: sgl_spec_verify_width(num_draft_tokens=8,
    is_draft_worker=False)"``), ``value`` the answer as JSON (None: one width
    at every batch size), ``source`` how messages name where it comes from
    (``algorithm SBD (plugin 'sbd'): sgl_spec_verify_width(...)``)."""

    key: str
    value: Any
    source: str


_joined: Optional[Path] = None
_created: Optional[Path] = None


def process_label() -> str:
    """How messages name this process: pid, multiprocessing name, program."""
    return f"pid {os.getpid()} ({multiprocessing.current_process().name}, {Path(sys.argv[0] or 'python').name})"


def started(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot, from /proc), or None where it cannot be read."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_this_start: Tuple[int, Optional[int]] = (0, None)


def _started_here() -> Optional[int]:
    """:func:`started` of this process, read once (a forked child, another pid, reads its own)."""
    global _this_start
    if _this_start[0] != os.getpid():
        _this_start = (os.getpid(), started(os.getpid()))
    return _this_start[1]


def record_file(where: Path, answer: str) -> Path:
    """The file of ``where`` that records ``answer``."""
    if answer == FINGERPRINT:
        return where / "fingerprint.json"
    return where / f"answer.{hashlib.sha256(answer.encode('utf-8')).hexdigest()[:16]}.json"


def join(fingerprint: str, environ=os.environ, inputs: Any = None) -> str:
    """Take part in this server's agreement: create it (first process) or
    compare ``fingerprint`` with the one recorded; ``inputs``: what it digests
    (:func:`~.fingerprint.as_json` of :func:`~.fingerprint.fingerprint_data`),
    recorded by the first process and compared to say what differs. Returns a log line."""
    global _joined, _created
    named = _named(environ)
    if named is None and environ.get(AGREEMENT_ENV):
        _refuse_vanished(environ[AGREEMENT_ENV])
    if named is not None and _spawned_by(named):
        where = named
    else:  # the first process of a server (an agreement inherited from an unrelated process is not ours)
        try:
            where = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{_started_here()}-"))
        except OSError as exc:
            raise AgreementError(f"cannot make an agreement directory in {tempfile.gettempdir()} ({_os_error(exc)}); set "
                                 f"TMPDIR to a writable directory, or {AGREEMENT_ENV} to one made for this server") from exc
        (where / "creator").write_text(str(os.getpid()))
        environ[AGREEMENT_ENV] = str(where)
        _created = where
        atexit.register(shutil.rmtree, where, True)
    if inputs is not None and not record_file(where, FINGERPRINT).exists():
        # the first process, before its fingerprint: whoever reads the fingerprint finds what it digests
        _record_or_read(where, INPUTS, inputs, "this process's fingerprint")
    first = _record_or_read(where, FINGERPRINT, fingerprint, "this process's fingerprint")
    _refuse_unrelated(where, first)
    if first["value"] != fingerprint:
        raise DisagreementError(_fingerprint_message(fingerprint, first, where, inputs))
    _joined = where
    return printable(f"agreement {where}: fingerprint {fingerprint} "
                     + ("recorded" if _is_me(first) else f"equals {first['process']}'s"))


def _refuse_vanished(named: str) -> None:
    """Refuse an agreement directory that a process of this server made (its name holds the maker's pid and
    start time: :data:`PREFIX`) and that is gone while its maker, an ancestor of this process, still runs:
    removed while the server's processes start. Another that is gone is an earlier server's (a process
    spawned from a launcher with one is warned that it agrees with nobody)."""
    found = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-(\d+|None)-\w+", Path(named).name)
    if found is None:
        if multiprocessing.parent_process() is not None:
            logger.warning("sglang-spec-plugins: %s=%s names no directory: this process, spawned by another, makes an "
                           "agreement of its own and agrees with no other process of its server; if its launcher made "
                           "that directory, something removed it: restart the server", AGREEMENT_ENV, named)
        return
    pid, when, ancestors = int(found.group(1)), found.group(2), _ancestors()
    if ancestors is None or pid not in ancestors or (when != "None" and str(started(pid)) != when):
        return
    raise AgreementError(
        f"{AGREEMENT_ENV}={named}: this server's agreement directory, made by its process pid {pid} (an ancestor of this "
        "process, still running), is gone: something removed it while the server's processes started (a cleaner of "
        "temporary files, such as systemd-tmpfiles or tmpwatch, or a script), so this process cannot agree with the "
        "others on the widths they serve; restart the server, and keep the directory: set TMPDIR, or "
        f"{AGREEMENT_ENV} to a directory made for this server, to one no cleaner removes")


def agree(answer: Answer) -> None:
    """Record ``answer`` or compare it with the answer another process of this
    server resolved first (no-op outside a server)."""
    if _joined is None:
        return
    first = _record_or_read(_joined, answer.key, answer.value, answer.key)
    if first["value"] != answer.value:
        raise DisagreementError(_answer_message(answer, first))


def compare(fingerprint: str, answers: Iterable[Answer], environ=os.environ, inputs: Any = None) -> List[str]:
    """Problems between this process's answers and a server's agreement named
    in ``environ`` (none if there is none), as :func:`join` and :func:`agree`
    would meet them; records nothing."""
    try:
        where = _named(environ)
        if where is None:
            return []
        problems = []
        recorded = _read(where, FINGERPRINT)
        if recorded is not None and recorded["value"] != fingerprint:
            problems.append(_fingerprint_message(fingerprint, recorded, where, inputs))
        for answer in answers:
            first = _read(where, answer.key)
            if first is not None and first["value"] != answer.value:
                problems.append(_answer_message(answer, first))
        return problems + _unwritable(where)
    except AgreementError as exc:
        return [str(exc)]


def shown(value: Any) -> str:
    """An answer's JSON value as messages show it."""
    if value is None:
        return "one width at every batch size"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{size} = {width}" for size, width in sorted(value.items(), key=lambda kv: int(kv[0]))) + "}"
    return str(value)


def _named(environ) -> Optional[Path]:
    """The directory ``environ`` names, if it names one that exists; a path
    that exists but is not a directory is refused (nothing here makes one)."""
    named = environ.get(AGREEMENT_ENV)
    if not named:
        return None
    path = Path(named)
    try:
        if not path.exists() or path.is_dir():
            return path if path.is_dir() else None  # gone with the server that made it: a new server makes its own
        kind = file_kind(path.stat().st_mode)
    except OSError as exc:
        raise AgreementError(f"{AGREEMENT_ENV}={named}: cannot be read ({_os_error(exc)}); unset {AGREEMENT_ENV} (the "
                             "server's first process then makes a fresh directory) or name a directory") from exc
    raise AgreementError(f"{AGREEMENT_ENV}={named}: {kind}, not a directory; unset {AGREEMENT_ENV} (the server's first "
                         "process then makes a fresh directory) or name a directory")


def _spawned_by(where: Path) -> bool:
    """Whether this process was spawned by ``multiprocessing`` (as SGLang
    spawns its schedulers, detokenizer and DP controller) from the process
    that created the agreement at ``where`` or from one of its descendants
    (ancestry read from /proc; True where it cannot be read). A plain
    subprocess, such as another server a program starts, has its own. An
    agreement without a creator (made by hand) is joined by anyone."""
    try:
        creator = int((where / "creator").read_text())
    except (OSError, ValueError):
        return True
    if multiprocessing.parent_process() is None:
        return False
    ancestors = _ancestors()
    return ancestors is None or creator in ancestors


def _ancestors() -> Optional[List[int]]:
    """The pids of this process's ancestors, nearest first; None where /proc cannot be read."""
    found, pid = [], os.getppid()
    for _ in range(64):
        found.append(pid)
        if pid <= 1:
            return found
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return found


def _record_or_read(where: Path, answer: str, value: Any, what: str) -> Dict[str, Any]:
    """Record ``value`` for ``answer`` in ``where`` unless a process did first
    (atomically: a hard link to a complete file), and return the record that
    holds, checked (:func:`_read`)."""
    path = record_file(where, answer)
    record = {"answer": answer, "value": value, "process": process_label(), "pid": os.getpid(),
              "started": _started_here()}
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        try:
            scratch.write_text(json.dumps(record))
            os.link(scratch, path)
            return record
        except FileExistsError:
            pass
        finally:
            scratch.unlink(missing_ok=True)
    except OSError as exc:
        if not where.is_dir():
            raise AgreementError(f"{AGREEMENT_ENV}={where}: cannot record {what}: the directory is gone, removed while "
                                 "the server runs (a cleaner of temporary files, or a script), so its processes can no "
                                 "longer agree on the widths they serve; restart the server, and keep the directory: "
                                 f"set TMPDIR, or {AGREEMENT_ENV} to one no cleaner removes") from exc
        raise AgreementError(f"{AGREEMENT_ENV}={where}: cannot record {what} in it ({_os_error(exc)}); make it writable "
                             f"for this process, or unset {AGREEMENT_ENV} (the server's first process then makes a fresh "
                             "directory)") from exc
    first = _read(where, answer)
    if first is None:  # removed between the link and the read
        raise AgreementError(f"{path} vanished while this process read it: something else removes files in {where}; "
                             f"give this server its own directory, or unset {AGREEMENT_ENV}")
    return first


def _read(where: Path, answer: str) -> Optional[Dict[str, Any]]:
    """The record of ``answer`` in ``where``, None if there is none; an
    AgreementError for anything else there, or a record of a process no longer running."""
    path = record_file(where, answer)
    remove = (f"no process writes one (records are written whole): remove it, or the directory {where}, or unset "
              f"{AGREEMENT_ENV}")
    try:
        if not path.exists():
            return None
        if not path.is_file():
            raise AgreementError(f"{path}: not an agreement record ({file_kind(path.stat().st_mode)}, not a regular "
                                 f"file); {remove}")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise AgreementError(f"{path}: cannot be read ({_os_error(exc)}); make it readable for this process, or unset "
                             f"{AGREEMENT_ENV}") from exc
    if not text.strip():
        raise AgreementError(f"{path}: not an agreement record (empty); {remove}")
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise AgreementError(f"{path}: not an agreement record (not JSON: {exc}); {remove}") from None
    if (not isinstance(record, dict) or set(record) != set(RECORD_KEYS) or type(record["pid"]) is not int
            or record["answer"] != answer):
        held = json.dumps(record)
        raise AgreementError(f"{path}: not an agreement record (it holds {held[:120]}{'...' if len(held) > 120 else ''}, "
                             f"not an object with {', '.join(RECORD_KEYS[:-1])} and {RECORD_KEYS[-1]}); {remove}")
    if not _running(record):
        raise AgreementError(f"{path} was recorded by {record['process']}, which is no longer running: a record an "
                             f"earlier server left in a reused directory; remove {where} (or the files in it), or unset "
                             f"{AGREEMENT_ENV}")
    return record


def _running(record: Dict[str, Any]) -> bool:
    """Whether the process that wrote ``record`` still runs (the same process:
    a pid used again has another start time)."""
    pid = record["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass  # runs, as another user
    now = started(pid)
    return now is None or record["started"] is None or now == record["started"]


def _is_me(record: Dict[str, Any]) -> bool:
    return record["pid"] == os.getpid() and record["started"] == _started_here()


def _refuse_unrelated(where: Path, first: Dict[str, Any]) -> None:
    """The fingerprint is recorded by the server's first process: this one, or one it descends from."""
    if _is_me(first):
        return
    ancestors = _ancestors()
    if ancestors is None or first["pid"] in ancestors:
        return
    raise AgreementError(f"{record_file(where, FINGERPRINT)} was recorded by {first['process']}, which runs but is "
                         f"neither this process nor one it descends from: two servers share {AGREEMENT_ENV}={where}; "
                         f"give each server its own directory, or unset {AGREEMENT_ENV}")


def _unwritable(where: Path) -> List[str]:
    """What :func:`_record_or_read` would meet writing in ``where`` (``check``'s look: nothing stays written)."""
    scratch = where / f".check.{os.getpid()}"
    try:
        scratch.write_text("")
        scratch.unlink()
    except OSError as exc:
        return [f"{AGREEMENT_ENV}={where}: cannot record this process's fingerprint in it ({_os_error(exc)}); make it "
                f"writable for this process, or unset {AGREEMENT_ENV} (the server's first process then makes a fresh "
                "directory)"]
    return []


def _os_error(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc}"


def _fingerprint_message(fingerprint: str, first: Dict[str, Any], where: Path, inputs: Any = None) -> str:
    """Why this process may not join: its fingerprint, the recorded one, and what differs where both
    processes' inputs are known (:data:`INPUTS`)."""
    from .fingerprint import differences, digest

    head = f"this process ({process_label()}) has fingerprint {fingerprint}, but {first['process']} of the same " \
           f"server has {first['value']}"
    theirs = _read(where, INPUTS) if inputs is not None else None
    if theirs is not None and isinstance(theirs["value"], dict) and digest(theirs["value"]) == first["value"]:
        found = differences(inputs, theirs["value"], theirs["process"])
        if found:
            cause = ("a plugin was installed, upgraded or removed while the server's processes started (or they see "
                     "other installed packages): restart the server once no install runs"
                     if any(line.startswith(("plugin ", "sglang-spec-plugins ", "SGLang ")) for line in found) else
                     "they read other plugins.toml settings (SGLANG_SPEC_PLUGINS_CONFIG, or a file changed while they "
                     "started): give every process of the server the same file")
            return f"{head}: {'; '.join(found)}; {cause} ({AGREEMENT_ENV}={where})"
    loads = ""
    if isinstance(inputs, dict):
        plugins = [f"{p[0]} ({p[1]}=={p[2]})" if p[1] else p[0] for p in inputs.get("plugins", [])]
        loads = f"; this process loads plugins {', '.join(plugins) or 'none'} on SGLang {inputs.get('sglang')}"
    return (f"{head}: they load other plugins, plugin versions, plugins.toml settings or answers (another "
            f"plugins.toml through the environment, another installed version){loads}; compare with the "
            f"'fingerprint' log line of {first['process']} ({AGREEMENT_ENV}={where})")


def _answer_message(answer: Answer, first: Dict[str, Any]) -> str:
    return (f"{answer.source} is {shown(answer.value)} in this process ({process_label()}) but {shown(first['value'])} "
            f"in {first['process']} of the same server: the plugin's answer depends on the process, and ranks that "
            f"verify different widths produce wrong tokens")


def _reset_for_tests(environ=os.environ) -> None:
    """Leave the agreement (tests only); the directory this process created is removed."""
    global _joined, _created
    if _created is not None:
        if environ.get(AGREEMENT_ENV) == str(_created):
            del environ[AGREEMENT_ENV]
        shutil.rmtree(_created, ignore_errors=True)
    _joined = _created = None
