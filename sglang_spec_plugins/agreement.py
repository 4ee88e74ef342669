"""The processes of one SGLang server agree on the fingerprint and every width, or stop.

SGLang runs the loader in the launcher and in every process it spawns (one
scheduler per TP/PP rank, each DP replica, the detokenizer, the DP
controller). The first of them to load (the launcher) creates a directory,
records its fingerprint there and names the directory in
``$SGLANG_SPEC_PLUGINS_AGREEMENT``, which every process it spawns inherits.
Each later process compares its fingerprint with the recorded one
(:func:`join`), and each width, when a process first resolves it, is recorded
under its (algorithm, num_draft_tokens, worker) or compared with the width
recorded there first (:func:`agree_on_width`). A difference stops that
process before it loads weights, naming both values and both processes.

What it covers: the processes one launcher spawns, on its node (the
directory is node-local). Ranks on other nodes are spawned by their own
launcher and agree among themselves; compare the fingerprint each node logs.
``check`` reads an agreement named in its environment (:func:`compare`) but
records nothing.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from .errors import SpecPluginError

AGREEMENT_ENV = "SGLANG_SPEC_PLUGINS_AGREEMENT"
"""Environment variable: the directory where this server's processes record fingerprint and widths."""


class DisagreementError(SpecPluginError):
    """Two processes of one server resolved different fingerprints or widths."""


_joined: Optional[Path] = None
_created: Optional[Path] = None


def process_label() -> str:
    """How messages name this process: pid, multiprocessing name, program."""
    return f"pid {os.getpid()} ({multiprocessing.current_process().name}, {Path(sys.argv[0] or 'python').name})"


def join(fingerprint: str, environ=os.environ) -> str:
    """Take part in this server's agreement: create it (first process) or
    compare ``fingerprint`` with the one recorded. Returns a log line."""
    global _joined, _created
    named = environ.get(AGREEMENT_ENV)
    if named and Path(named).is_dir() and _spawned_by(Path(named)):
        where = Path(named)
    else:  # the first process of a server (an agreement inherited from an unrelated process is not ours)
        where = Path(tempfile.mkdtemp(prefix="sglang-spec-plugins-"))
        (where / "creator").write_text(str(os.getpid()))
        environ[AGREEMENT_ENV] = str(where)
        _created = where
        atexit.register(shutil.rmtree, where, True)
    first = _record_or_read(where / "fingerprint.json", {"fingerprint": fingerprint, "process": process_label()})
    if first["fingerprint"] != fingerprint:
        raise DisagreementError(_fingerprint_message(fingerprint, first, where))
    _joined = where
    return f"agreement {where}: fingerprint {fingerprint} " + ("recorded" if first["process"] == process_label() else f"equals {first['process']}'s")


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
    pid = os.getppid()
    for _ in range(32):
        if pid == creator:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return True
    return False


def agree_on_width(algorithm: str, plugin: str, num_draft_tokens: int, is_draft_worker: bool, width: int) -> None:
    """Record ``width`` or compare it with the width another process of this
    server resolved first for the same arguments (no-op outside a server)."""
    if _joined is None:
        return
    first = _record_or_read(_width_file(_joined, algorithm, num_draft_tokens, is_draft_worker),
                            {"width": width, "process": process_label()})
    if first["width"] != width:
        raise DisagreementError(_width_message(algorithm, plugin, num_draft_tokens, is_draft_worker, width, first))


def compare(fingerprint: str, widths: Mapping[str, Mapping[str, Any]], environ=os.environ) -> List[str]:
    """Problems between this process's answers and a server's agreement named
    in ``environ`` (none if there is none); records nothing. ``widths``:
    algorithm -> {"plugin", "widths": {ndt: {"target", "draft"}}}, as ``check`` builds it."""
    named = environ.get(AGREEMENT_ENV)
    if not named or not Path(named).is_dir():
        return []
    where, problems = Path(named), []
    recorded = _read(where / "fingerprint.json")
    if recorded and recorded["fingerprint"] != fingerprint:
        problems.append(_fingerprint_message(fingerprint, recorded, where))
    for algorithm, entry in widths.items():
        for ndt, per_worker in entry["widths"].items():
            for draft in (False, True):
                width = per_worker.get("draft" if draft else "target")
                if width is None:  # the draft worker's width is not resolved when it never verifies
                    continue
                first = _read(_width_file(where, algorithm, int(ndt), draft))
                if first and first["width"] != width:
                    problems.append(_width_message(algorithm, entry["plugin"], int(ndt), draft, width, first))
    return problems


def _fingerprint_message(fingerprint: str, first: Dict[str, Any], where: Path) -> str:
    return (f"this process ({process_label()}) has fingerprint {fingerprint}, but {first['process']} of the same "
            f"server has {first['fingerprint']}: they load other plugins, plugin versions, plugins.toml settings or "
            f"answers (another plugins.toml through the environment, another installed version); compare the "
            f"'fingerprint' log lines of both processes ({AGREEMENT_ENV}={where})")


def _width_message(algorithm: str, plugin: str, ndt: int, is_draft_worker: bool, width: int, first: Dict[str, Any]) -> str:
    return (f"algorithm {algorithm} (plugin {plugin!r}): sgl_spec_verify_width(num_draft_tokens={ndt}, "
            f"is_draft_worker={is_draft_worker}) is {width} in this process ({process_label()}) but {first['width']} in "
            f"{first['process']} of the same server: the plugin's answer depends on the process, and ranks that verify "
            f"different widths produce wrong tokens")


def _width_file(where: Path, algorithm: str, ndt: int, is_draft_worker: bool) -> Path:
    return where / f"width.{algorithm}.{ndt}.{'draft' if is_draft_worker else 'target'}.json"


def _record_or_read(path: Path, data: Dict[str, Any]) -> Dict[str, Any]:
    """Write ``data`` to ``path`` unless a process did first (atomically:
    a hard link to a complete file), and return what ``path`` holds."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps(data))
    try:
        os.link(scratch, path)
        return data
    except FileExistsError:
        return json.loads(path.read_text())
    finally:
        scratch.unlink()


def _read(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _reset_for_tests(environ=os.environ) -> None:
    """Leave the agreement (tests only); the directory this process created is removed."""
    global _joined, _created
    if _created is not None:
        if environ.get(AGREEMENT_ENV) == str(_created):
            del environ[AGREEMENT_ENV]
        shutil.rmtree(_created, ignore_errors=True)
    _joined = _created = None
