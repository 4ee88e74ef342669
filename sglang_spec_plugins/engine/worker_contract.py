"""What the installed SGLang does with the worker class a plugin's factory returns.

SGLang's scheduler calls ``spec_algorithm.create_worker(server_args)`` (which
calls the plugin's ``worker_factory``), instantiates the class it gets with
keyword arguments, and from then on drives it like its own speculative
workers. Which keywords, which members and which batch schema changed across
releases; :func:`contract` reads them off the installed source files (nothing
is imported) and :func:`check_worker` says whether a worker class fits.

Facts probed, each from the file SGLang runs:

* ``constructor_kwargs``: the keywords of the scheduler's
  ``DraftWorkerClass(**draft_worker_kwargs)`` call (``managers/scheduler.py``);
* ``base_class`` and ``base_abstract``: SGLang's spec-worker base class
  (``speculative/base_spec_worker.BaseSpecWorker``) and the members it leaves
  abstract;
* ``scheduler_members``: members the scheduler package reads on every draft
  worker (``self.draft_worker.X``) that the base class defines, i.e. the ones
  every speculative worker has, not one algorithm's extras;
* ``forward_keywords``: keywords the scheduler passes to
  ``forward_batch_generation`` besides the batch;
* ``overlap_refused``: ``CustomSpecAlgo.create_worker`` refuses an algorithm
  registered with ``supports_overlap=False`` unless overlap scheduling is
  disabled (``--disable-overlap-schedule``);
* ``non_overlap_schema``: how such an algorithm is driven: ``"v1"`` (the
  synchronous V1 worker path; ``supports_spec_v2`` follows
  ``supports_overlap``) or ``"v2-sync"`` (the V2 schema, run synchronously);
* ``spec_logprobs``: ``module:function`` of the release's spec-verify
  logprob function (``compute_spec_logprobs`` 0.5.19+, ``compute_spec_v2_logprobs``
  0.5.14-0.5.18), what its own drafters hand ``return_logprob`` requests; None where it has none;
* ``worker_reads``: every member SGLang reads off a speculative worker
  anywhere in ``sglang/srt`` (disaggregation, memory-pool and KV-cache
  builders, HiCache, weight updates, metrics, the base class's defaults), as
  paths such as ``draft_worker.draft_runner.token_to_kv_pool`` with the file
  and line (:mod:`.worker_reads`); ``required_reads`` are those made on every
  worker.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from ..errors import show
from .probe import installed_version, method_source, source_file
from .source_cache import SourceFile, cached
from .source_text import pruned_module
from .worker_reads import NAMES, WorkerRead, parsed, worker_reads

SCHEDULER = "sglang.srt.managers.scheduler"
BASE_MODULE = "sglang.srt.speculative.base_spec_worker"
BASE_NAME = "BaseSpecWorker"
REGISTRY = "sglang.srt.speculative.spec_registry"
FORWARD = "forward_batch_generation"
OVERLAP_FLAG = "--disable-overlap-schedule"
SPEC_LOGPROBS = (("sglang.srt.layers.logprob_processor", "compute_spec_logprobs"),
                 ("sglang.srt.layers.logprob_processor", "compute_spec_v2_logprobs"),
                 ("sglang.srt.layers.utils.logprob", "compute_spec_v2_logprobs"))
"""Where releases keep the logprob function of their spec verify, newest first."""


@dataclass(frozen=True)
class WorkerContract:
    """What one SGLang release expects of a plugin's worker class (see the module doc)."""

    release: Optional[str]
    constructor_kwargs: Tuple[str, ...] = ()
    base_class: Optional[str] = None
    base_abstract: Tuple[str, ...] = ()
    scheduler_members: Tuple[str, ...] = ()
    forward_keywords: Tuple[str, ...] = ()
    overlap_refused: bool = False
    non_overlap_schema: Optional[str] = None
    spec_logprobs: Optional[str] = None
    worker_reads: Tuple[WorkerRead, ...] = ()

    @property
    def overlap_schema(self) -> bool:
        """Whether the release drives spec workers on the V2 schema under its overlap
        scheduler: it passes them ``on_publish`` (its FutureMap's publish of the step's
        sequence lengths), 0.5.14+."""
        return self.non_overlap_schema == "v2-sync" and "on_publish" in self.forward_keywords

    @property
    def required_reads(self) -> Tuple[WorkerRead, ...]:
        """The first place SGLang reads each path off every speculative worker
        (not only one algorithm's, not tolerating its absence)."""
        first = {}
        for read in self.worker_reads:
            if not read.optional:
                first.setdefault(read.path, read)
        return tuple(first.values())

    @property
    def required_members(self) -> Tuple[str, ...]:
        """Members a worker class must have: the base's abstract ones, those the
        scheduler reads on every worker, the first member of every path SGLang
        reads off every worker, and ``forward_batch_generation``."""
        read = {r.path.split(".")[0] for r in self.required_reads}
        return tuple(sorted({*self.base_abstract, *self.scheduler_members, *read, FORWARD}))


def overlap_flag_needed(supports_overlap: bool, found: WorkerContract) -> Optional[str]:
    """The flag an operator must pass for an algorithm with this
    ``supports_overlap`` on the release ``found`` describes
    (``"--disable-overlap-schedule"``), or None when it starts without one."""
    return OVERLAP_FLAG if found.overlap_refused and not supports_overlap else None


def overlap_mode(supports_overlap: bool, disable_overlap: bool, found: WorkerContract) -> Tuple[bool, str]:
    """``(overlapped, why)``: whether the release runs an algorithm with this
    ``supports_overlap`` under its overlap scheduler, given ``--disable-overlap-schedule``."""
    if disable_overlap:
        return False, "synchronous: --disable-overlap-schedule"
    if not supports_overlap:
        return False, (f"refused: supports_overlap=False needs {OVERLAP_FLAG}" if found.overlap_refused
                       else "synchronous: supports_overlap=False")
    if not found.overlap_schema:
        return False, f"refused: SGLang {found.release} has no V2 overlap schema for plugin workers (0.5.14+)"
    return True, "overlapped: supports_overlap=True and SGLang's overlap scheduler (its default)"


def check_worker(worker_cls: object, found: WorkerContract) -> List[str]:
    """Why ``worker_cls`` does not fit the release ``found`` describes; empty
    when it fits. Each line names the member or keyword and the release, and
    for a member SGLang reads (at any depth: ``draft_worker.draft_runner``)
    the file and line that read it."""
    where = f"SGLang {found.release}"
    if not isinstance(worker_cls, type):
        return [f"the worker factory returned {show(worker_cls)}, not a class; {where} instantiates what it returns"]
    problems = []
    try:
        signature = inspect.signature(worker_cls)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and found.constructor_kwargs:
        try:
            signature.bind(**{name: None for name in found.constructor_kwargs})
        except TypeError as exc:
            problems.append(
                f"{worker_cls.__name__}{signature} cannot be called the way {where} creates the worker, "
                f"{worker_cls.__name__}({', '.join(f'{k}=...' for k in found.constructor_kwargs)}): {exc}"
            )
    assigned = _init_assignments(worker_cls)
    missing = [name for name in found.required_members
               if name != FORWARD and not hasattr(worker_cls, name) and name not in assigned]
    if missing:
        sites = {r.path: r for r in found.required_reads}
        named = ", ".join(f"{name} ({sites[name].where})" if name in sites else name for name in missing)
        problems.append(f"{worker_cls.__name__} lacks {named}, which {where} uses on every speculative "
                        f"worker; build on sglang_spec_plugins.worker.worker_base() "
                        f"({found.base_class or 'SGLang'}'s defaults) to have them")
    problems += _uncallable(worker_cls, found, assigned)
    problems += _unanswered_paths(worker_cls, found, assigned)
    if not hasattr(worker_cls, FORWARD):
        problems.append(f"{worker_cls.__name__} defines no {FORWARD}(self, batch, **kwargs), which the {where} "
                        "scheduler calls on every step")
    forward = getattr(worker_cls, FORWARD, None)
    if inspect.iscoroutinefunction(forward) or inspect.isasyncgenfunction(forward):
        problems.append(f"{worker_cls.__name__}.{FORWARD} is a coroutine function (async def): {where} calls it and "
                        "uses what it returns, which would be a coroutine object; make it a plain def")
    elif callable(forward):
        try:
            signature = inspect.signature(forward)
        except (TypeError, ValueError):  # no signature to read (a builtin, an odd callable): nothing to check
            signature = None
        try:
            if signature is not None:
                signature.bind(None, None, **{name: None for name in found.forward_keywords})
        except TypeError as exc:
            keywords = "".join(f", {k}=..." for k in found.forward_keywords)
            problems.append(f"{worker_cls.__name__}.{FORWARD}{signature} cannot take what {where} passes, "
                            f"(batch{keywords}): {exc}")
    abstract = sorted(getattr(worker_cls, "__abstractmethods__", ()) or ())
    if abstract:
        problems.append(f"{worker_cls.__name__} leaves abstract {', '.join(abstract)}; {where} cannot instantiate it")
    return problems


def _uncallable(worker_cls: type, found: WorkerContract, assigned: dict) -> List[str]:
    """Members SGLang calls on every worker (``init_cuda_graphs()``) that the
    class holds as something that cannot be called (``init_cuda_graphs = None``);
    one made by the constructor is not judged."""
    problems = []
    for read in found.required_reads:
        if read.path == FORWARD or "." in read.path or read.path in assigned or not any(
                r.called and r.path == read.path and not r.optional for r in found.worker_reads):
            continue
        value = inspect.getattr_static(worker_cls, read.path, _ABSENT)
        if value is not _ABSENT and not callable(value) and not isinstance(value, (property, functools.cached_property,
                                                                                    staticmethod, classmethod)):
            what = "is None" if value is None else f"is {show(value)}, a {type(value).__name__}"
            problems.append(f"{worker_cls.__name__}.{read.path} {what}, not a method, but SGLang {found.release} calls it "
                            f"on every speculative worker ({read.where})")
    return problems


_ABSENT = object()


def _unanswered_paths(worker_cls: type, found: WorkerContract, assigned: dict) -> List[str]:
    """The nested paths SGLang reads (``draft_worker.draft_runner.token_to_kv_pool``)
    that the class does not answer, judged on an instance made without
    running its constructor: a member that needs the constructor is taken
    from a ``self.name = None`` there, or else not judged. A None is fine
    where SGLang checks for it before reading further."""
    try:
        bare = object.__new__(worker_cls)
    except TypeError:  # abstract: reported above
        return []
    problems: List[str] = []
    reported = set()
    for read in found.worker_reads:
        head, *rest = read.path.split(".")
        if read.optional or not rest or "[" in read.path or head in reported:
            continue
        try:
            value = getattr(bare, head)
        except Exception:  # made by the constructor
            if "None" not in (assigned.get(head), assigned.get(f"_{head}")):
                continue
            value = None
        for depth, name in enumerate(rest):
            answered = ".".join([head, *rest[:depth]])
            if value is None and answered in read.checked:
                break
            if value is None or not hasattr(value, name):
                reported.add(head)
                what = "is None" if value is None else f"({type(value).__name__}) has no {name}"
                problems.append(f"{worker_cls.__name__}.{answered} {what}, but SGLang {found.release} reads "
                                f"{read.path} off every speculative worker but NGRAM ({read.where}); build on "
                                "sglang_spec_plugins.worker.worker_base(), whose draft_worker "
                                "answers it for a worker without a draft model")
                break
            value = getattr(value, name)
    return problems


def _init_assignments(worker_cls: type) -> dict:
    """``name -> value source`` of every ``self.name = value`` in the
    constructors of the class and its bases (members made at construction)."""
    found = {}
    for cls in reversed(worker_cls.__mro__):
        init = cls.__dict__.get("__init__")
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init))) if init is not None else None
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in getattr(node, "targets", [getattr(node, "target", None)]):
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self" and node.value is not None):
                        found[target.attr] = ast.unparse(node.value)
    return found


@functools.lru_cache(maxsize=None)
def contract() -> WorkerContract:
    """The installed release's contract, read off its source (cached per
    process, and between processes by :mod:`.source_cache`, keyed by the
    content of ``sglang/srt``)."""
    release = installed_version()
    scheduler = source_file(SCHEDULER)
    if release is None or scheduler is None:
        return WorkerContract(release=release)
    from . import probe, source_text, worker_reads as reads

    return cached("worker-contract", scheduler.parents[1], (sys.modules[__name__], reads, probe, source_text),
                  lambda files: _read_contract(release, scheduler, files), _encode, lambda data: _decode(data, release))


def _encode(found: WorkerContract) -> dict:
    """A contract as JSON data, without its release (read from the metadata in each process)."""
    data = dataclasses.asdict(found)
    del data["release"]
    return data


def _decode(data: dict, release: str) -> WorkerContract:
    """The contract :func:`_encode` gave ``data`` for, at ``release``."""
    reads = tuple(WorkerRead(**{**read, "checked": tuple(read["checked"])}) for read in data["worker_reads"])
    fields = {name: tuple(value) if isinstance(value, list) else value for name, value in data.items()}
    return WorkerContract(release=release, **{**fields, "worker_reads": reads})


def _read_contract(release: str, scheduler: Path, files: Sequence[SourceFile]) -> WorkerContract:
    """The contract, read off the source files (``files``: every one of ``sglang/srt``) of the release whose
    scheduler is the file at ``scheduler``."""
    base = _top_class(_parse(BASE_MODULE), BASE_NAME)
    base_members = _class_members(base) if base is not None else set()
    create_worker = method_source(REGISTRY, "CustomSpecAlgo.create_worker")
    spec_v2 = method_source(REGISTRY, "CustomSpecAlgo.supports_spec_v2")
    return WorkerContract(
        release=release,
        constructor_kwargs=_constructor_kwargs(scheduler),
        base_class=f"{BASE_MODULE}.{BASE_NAME}" if base is not None else None,
        base_abstract=tuple(sorted(_abstract_members(base))) if base is not None else (),
        scheduler_members=tuple(sorted(_draft_worker_reads() & base_members)),
        forward_keywords=tuple(sorted(_forward_keywords())),
        overlap_refused=create_worker is not None and _refuses_without_overlap(ast.parse(create_worker)),
        non_overlap_schema="v1" if spec_v2 is not None and "supports_overlap" in spec_v2 else "v2-sync",
        spec_logprobs=next((f"{module}:{name}" for module, name in SPEC_LOGPROBS if method_source(module, name)), None),
        worker_reads=worker_reads(files),
    )


def _parse(module_name: str) -> Optional[ast.Module]:
    path = source_file(module_name)
    return None if path is None else parsed(path)


def _top_class(tree: Optional[ast.Module], name: str) -> Optional[ast.ClassDef]:
    if tree is None:
        return None
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _class_members(cls: ast.ClassDef) -> set:
    names = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("__")}


def _abstract_members(cls: ast.ClassDef) -> set:
    return {
        node.name for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(ast.unparse(d).endswith("abstractmethod") for d in node.decorator_list)
    }


def _functions(tree: ast.Module) -> Iterable[ast.FunctionDef]:
    return (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _calls(node: ast.AST, attr: str) -> Iterable[ast.Call]:
    return (
        n for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
    )


def _naming(path: Path, name: str) -> ast.Module:
    """The file's tree with the functions that name ``name`` (an attribute, a
    method), the only ones that can read or call it (:func:`.pruned_module`)."""
    word = re.escape(name)  # as \bname\b, literal first (a leading \b makes re try every position)
    return pruned_module(path, re.compile(rf"{word}\b(?<!\w{word})"))


def _constructor_kwargs(scheduler: Path) -> Tuple[str, ...]:
    """Keywords of the call on what ``create_worker`` returned, in the function of
    the file at ``scheduler`` that calls it."""
    for func in _functions(_naming(scheduler, "create_worker")):
        for call in _calls(func, "create_worker"):
            assigned = next(
                (a.targets[0].id for a in ast.walk(func)
                 if isinstance(a, ast.Assign) and a.value is call and isinstance(a.targets[0], ast.Name)),
                None,
            )
            made = next(
                (c for c in ast.walk(func)
                 if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == assigned),
                None,
            )
            if made is not None:
                return tuple(_keywords(func, made))
    return ()


def _keywords(func: ast.AST, call: ast.Call) -> List[str]:
    """Keyword names a call passes: literal ones, and the keys of the dicts it
    unpacks that are built in ``func`` (``dict(k=...)``, ``{"k": ...}``, ``d["k"] = ...``)."""
    names = [k.arg for k in call.keywords if k.arg is not None]
    for spread in (k.value for k in call.keywords if k.arg is None):
        if not isinstance(spread, ast.Name):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == spread.id for t in node.targets):
                value = _speculative_branch(node.value)
                if isinstance(value, ast.Call) and ast.unparse(value.func) == "dict":
                    names += [k.arg for k in value.keywords if k.arg is not None]
                elif isinstance(value, ast.Dict):
                    names += [k.value for k in value.keys if isinstance(k, ast.Constant)]
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                            and target.value.id == spread.id and isinstance(target.slice, ast.Constant)):
                        names.append(target.slice.value)
    return list(dict.fromkeys(names))


def _speculative_branch(value: ast.expr) -> ast.expr:
    """Of ``a if <algorithm>.is_none() else b``, the branch taken with a
    speculative algorithm (b); of any other conditional, the one that is not
    empty; any other expression as it is."""
    if not isinstance(value, ast.IfExp):
        return value
    test = ast.unparse(value.test)
    if test.endswith("is_none()") and not test.startswith("not "):
        return value.orelse
    if test.startswith("not ") and test.endswith("is_none()"):
        return value.body
    return value.body if not (isinstance(value.body, ast.Dict) and not value.body.keys) else value.orelse


def _scheduler_modules(naming: str) -> Tuple[Path, ...]:
    """The files of the scheduler's package (its mixins live there) whose
    text holds ``naming`` (a file without the name cannot read it)."""
    path = source_file(SCHEDULER)
    if path is None:
        return ()
    return tuple(p for p in sorted(path.parent.rglob("*.py")) if naming in p.read_text(encoding="utf-8"))


def _is_self_member(node: ast.expr, name: str) -> bool:
    """Whether ``node`` is ``self.<name>``."""
    return (isinstance(node, ast.Attribute) and node.attr == name
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def _draft_worker_reads() -> set:
    """Members the scheduler package reads off ``self.draft_worker``: in the
    functions that name a worker (:data:`.worker_reads.NAMES`, a whole-word
    ``draft_worker`` among them), the trees :func:`.worker_reads.worker_reads`
    parsed already."""
    found = set()
    for path in _scheduler_modules("draft_worker"):
        for node in ast.walk(pruned_module(path, NAMES)):
            if isinstance(node, ast.Attribute) and _is_self_member(node.value, "draft_worker"):
                found.add(node.attr)
    return found


def _forward_keywords() -> set:
    """Keywords passed to ``self.model_worker.forward_batch_generation`` (the
    speculative worker when one is configured) anywhere in the scheduler package:
    in the functions that name a worker (``model_worker`` is one of
    :data:`.worker_reads.NAMES`), the trees :func:`.worker_reads.worker_reads` parsed."""
    found = set()
    for path in _scheduler_modules(FORWARD):
        for func in _functions(pruned_module(path, NAMES)):
            for call in _calls(func, FORWARD):
                if _is_self_member(call.func.value, "model_worker"):
                    found.update(_keywords(func, call))
    return found


def _refuses_without_overlap(tree: ast.AST) -> bool:
    """An ``if`` on ``disable_overlap_schedule`` and ``supports_overlap`` whose body raises."""
    return any(
        isinstance(node, ast.If)
        and {"disable_overlap_schedule", "supports_overlap"} <= {
            n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
        and any(isinstance(s, ast.Raise) for s in node.body)
        for node in ast.walk(tree)
    )
