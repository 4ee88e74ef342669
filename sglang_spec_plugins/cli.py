"""``sglang-spec-plugins list | check | doctor``.

``list`` never imports SGLang. ``check`` validates plugins.toml and every
answer the plugins give, in this process and once more in a fresh one, and,
where SGLang is installed, predicts what that release will do with the
setup. ``doctor`` probes the installed SGLang and says what the loader would
do. Every failure, of any origin, is reported as a problem (with ``--json``,
as JSON); exit status 0 when everything is in order, 1 when a problem was
found, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import __version__
from . import config as config_mod
from . import agreement, answers, loader, ndt_grid, scaffold
from .errors import SpecPluginError, printable
from .fingerprint import as_json, fingerprint, fingerprint_data
from .fingerprint import digest as fingerprint_digest
from .plugin_calls import package_fault, report_stream
from .plugins import PluginSet, discover_configured
from .policy import CONTROLLER, NOBODY, WORKER, build_policies
from .widths_by_batch_size import graph_cost

LOADER_ENTRY_POINT = "sglang_spec_plugins"
"""This package's entry-point name in SGLang's ``sglang.srt.plugins`` group."""


DESCRIPTIONS = {
    "list": """\
Show each hook of the contract and the plugins implementing it (distribution==version,
module file), then each enabled algorithm and its plugin. Never imports SGLang.""",
    "check": """\
Validate plugins.toml and the plugins without starting a server, and predict what the
installed SGLang will do with them. check runs the functions the server runs at start-up, so
it reports the faults the server would stop on.

- Every plugin fault, charged as the loader charges it.
- Every width SGLang asks for at each -n N (without -n: at each of the default
  speculative_num_draft_tokens the algorithm's validator and max_tokens_per_req allow): the
  target worker's, the maximum and, where the draft worker may verify, the draft worker's;
  each asked twice, and widths by batch size bucket by bucket, with who chooses a step's
  width where a bucket gives several (the worker, the acceptance controller, or nobody: the
  bucket's largest). A setting the worker would not serve is a problem naming its key (an
  acceptance controller beside a worker that picks its own widths, widths by batch size on
  a worker that verifies one width).
- The same check again in a fresh process, compared by fingerprint and widths
  (--single-process skips it); and, where $SGLANG_SPEC_PLUGINS_AGREEMENT names a running
  server's agreement, the differences from it.
- Where SGLang is installed: whether the release can serve plugin algorithms; the overlap
  rule (supports_overlap=False needs --disable-overlap-schedule, read off the release);
  whether each worker class fits the release's worker contract; each algorithm's own
  validate_server_args on the release's ServerArgs (policy_for answering it as in a server);
  a draft model's checkpoint; and each attention backend's verdict on every width (served /
  patched / refused; a draft worker's on the backend SGLang's draft-worker builder gives
  it, which may differ from the one named). A refusal of the backend named with
  --attention-backend is a problem, and so is a backend the release does not know. With
  --enable-dp-attention or --attn-dp-size above 1, widths by batch size (two widths or more)
  are a problem, with or without -n.
- Where SGLang is not installed, the validators and worker factories it could not run (SGLang
  hands them its own ServerArgs), named; the last line is then "ok, except what was not run
  here".

On a machine whose torch has no GPU, SGLang is imported on the CPU harness (stand-ins for
two torchvision operators, nothing else) and the output says so. What plugins write to
standard output while imported (print, sys.__stdout__, os.write(1, ...)) goes to stderr, so
--json prints one JSON document. Exit status 1 lists every problem; 130 when interrupted
(Ctrl-C, or a KeyboardInterrupt from plugin code, named).""",
    "doctor": """\
Probe the installed SGLang: the release (or why it does not import), whether its plugin
framework and algorithm registry are there, the width hooks its runners call, each patch's
verdict (applied / would apply / not needed / refused, with the reason), each attention
backend's support, what the loader would register (with on_error = "skip", also each
skipped plugin) and the fingerprint. A SGLANG_PLUGINS that leaves this package's loader out
is a problem.""",
    "new": """\
Write a drafter package: pyproject.toml with the entry point, the plugin module (the hooks),
the worker SGLang instantiates, tests that turn the conformance kit on, and a README. It
installs with pip and passes its tests as generated. Refused: names whose distribution or
module SGLang, this package or their dependencies use, that are already installed or
importable (pip install -e . would replace them), Python keywords and standard-library
modules, and SGLang's built-in algorithm names.""",
}
"""What each command does, as ``COMMAND --help`` prints it (and the CLI reference shows it)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``list``, ``check``, ``doctor`` and ``new``."""
    parser = argparse.ArgumentParser(prog="sglang-spec-plugins", description="Speculative-decoding drafter plugins for SGLang.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=DESCRIPTIONS[name],
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    p_list = command("list", "show loaded hooks, their plugins and the algorithms they serve")
    p_list.add_argument("--json", action="store_true", help="machine-readable output")

    p_check = command("check", "validate plugins.toml and the plugins, and predict what SGLang will do")
    p_check.add_argument("path", nargs="?", type=Path, help=f"the plugins.toml (default: ${config_mod.CONFIG_ENV}, then ./plugins.toml)")
    p_check.add_argument("--num-draft-tokens", "-n", type=_positive_int, action="append", default=[], metavar="N",
                         help="resolve and check every width SGLang asks for at this speculative_num_draft_tokens "
                              f"(repeatable; default: each of {', '.join(map(str, ndt_grid.DEFAULT_NDTS))} the algorithm accepts)")
    p_check.add_argument("--disable-overlap-schedule", action="store_true",
                         help="the server will run with --disable-overlap-schedule")
    p_check.add_argument("--attention-backend", metavar="NAME",
                         help="the server's --attention-backend: a refusal of it is a problem (default: report every known backend)")
    p_check.add_argument("--enable-dp-attention", action="store_true",
                         help="the server will run with --enable-dp-attention (widths by batch size are refused with it)")
    p_check.add_argument("--attn-dp-size", type=_positive_int, default=1, metavar="N",
                         help="the server's --attn-dp-size (SGLang 0.5.23+): above 1 is DP attention, as --enable-dp-attention")
    p_check.add_argument("--cuda-graph-bs", type=_positive_int, nargs="+", metavar="N",
                         help="the server's --cuda-graph-bs: count the CUDA graphs widths by batch size capture over those "
                              "sizes (each once per width of its bucket) and the logit rows they keep, and judge flashinfer's "
                              "workspace for the verify graphs at those sizes (with --model-path)")
    p_check.add_argument("--vocab-size", type=_positive_int, metavar="N",
                         help="the model's vocabulary size: the graphs' logits in bytes (with --cuda-graph-bs)")
    p_check.add_argument("--model-path", metavar="PATH",
                         help="the server's --model-path: a draft model is checked against this target's config, and so "
                              "is flashinfer's workspace (with --cuda-graph-bs)")
    p_check.add_argument("--speculative-draft-model-path", metavar="PATH",
                         help="the server's --speculative-draft-model-path (a drafter with its own draft model needs it)")
    p_check.add_argument("--single-process", action="store_true",
                         help="skip asking everything again in a fresh process and comparing the answers")
    p_check.add_argument("--json", action="store_true", help="machine-readable output")

    p_doctor = command("doctor", "probe the installed SGLang and say what the loader would do")
    p_doctor.add_argument("--json", action="store_true", help="machine-readable output")

    p_new = command("new", "write a drafter package: plugin, worker, tests that use the conformance kit")
    p_new.add_argument("name", help="package name, e.g. my_drafter (algorithm MY_DRAFTER)")
    p_new.add_argument("--dir", type=Path, default=Path("."), help="where to create it (default: the current directory)")
    p_new.add_argument("--draft-model", action="store_true",
                       help="a drafter with its own draft model (a DFlash-layout checkpoint, --speculative-draft-model-path)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    command = {"list": _list, "check": _check, "doctor": _doctor, "new": scaffold.command}[args.command]
    args.out = sys.stdout
    try:
        # What plugins and SGLang write to standard output while they are imported goes to stderr: stdout
        # carries only this command's report (with --json, one JSON document).
        with report_stream() as args.out:
            try:
                return command(args)
            except SpecPluginError as exc:
                return _fail(args, _problems_of(exc))
            except KeyboardInterrupt as exc:  # Ctrl-C, or plugin code that raised it: stop now, saying where
                print(f"error: {printable(exc) or 'interrupted (KeyboardInterrupt)'}", file=sys.stderr)
                return 130
            except Exception as exc:  # never a traceback for the operator; the message says where it came from
                return _fail(args, [package_fault(exc)])
    except BrokenPipeError:  # e.g. `list --json | head`: the reader left; say nothing more
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), args.out.fileno())
        return 1


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a speculative_num_draft_tokens: it must be 1 or more")
    return value


def _say(args: argparse.Namespace, *parts: Any) -> None:
    """One line of the report, every part :func:`~.errors.printable` (names come from files and plugins)."""
    print(*map(printable, parts), file=args.out)


def _list(args: argparse.Namespace) -> int:
    plugin_set = discover_configured()
    data = _describe(plugin_set)
    if args.json:
        _print_json(args, data)
        return 0
    _say(args, f"config: {data['config']}")
    _say(args, "hooks:")
    for hook, impls in data["hooks"].items():
        _say(args, f"  {hook}")
        if not impls:
            _say(args, "    (no loaded plugin implements it)")
        for impl in impls:
            _say(args, f"    {impl['plugin']:<16} {impl.get('distribution') or '-'}=={impl.get('version') or '-'}  {impl.get('module_file', '')}".rstrip())
    _say(args, "algorithms:")
    for name, algo in data["algorithms"].items():
        _say(args, f"  {name:<16} plugin {algo['plugin']} ({algo['distribution']}=={algo['version']}), overlap={algo['supports_overlap']}")
    if not data["algorithms"]:
        _say(args, "  (none enabled)")
    for note in data["notes"]:
        _say(args, f"note: {note}")
    return 0


_GRAPHS = {False: "target_cuda_graphs", True: "draft_cuda_graphs"}
"""A row's keys for the CUDA graphs each worker's widths by batch size capture (``check --cuda-graph-bs``)."""


def _add_graph_costs(policy, entry: Dict[str, Any], args: argparse.Namespace) -> None:
    """With ``--cuda-graph-bs``, what the CUDA graphs of each row's widths by
    batch size hold (``widths_by_batch_size.graph_cost``), beside them."""
    for ndt, row in entry["widths"].items():
        for draft, key in answers.BY_BATCH_SIZE.items():
            if key in row:
                row[_GRAPHS[draft]] = graph_cost(policy.widths_by_batch_size(int(ndt), draft), args.cuda_graph_bs,
                                                 args.vocab_size)


def _graphs_text(cost: Dict[str, Any]) -> str:
    size = f" ({cost['logit_bytes'] / 2 ** 30:.2f} GiB)" if "logit_bytes" in cost else ""
    return f"{cost['graphs']} CUDA graphs over --cuda-graph-bs {' '.join(map(str, cost['capture_sizes']))}, " \
           f"{cost['logit_rows']} logit rows{size}"


_CHOSEN_TEXT = {WORKER: "each step's width chosen by the worker", CONTROLLER: "each step's width chosen by the "
                "acceptance controller", NOBODY: "each step at its bucket's largest: nobody chooses"}
"""How ``check`` says who chooses a step's width among its bucket's (:meth:`~.policy.VerifyPolicy.chosen_by`)."""


def _buckets_text(plain: Dict[str, int]) -> str:
    return "{" + ", ".join(f"{size} = {width}" for size, width in plain.items()) + "}"


def _check(args: argparse.Namespace) -> int:
    if args.path is not None:
        config_mod.regular_file(args.path, printable(args.path), missing_ok=False)
    plugin_set = discover_configured(args.path, collect=True)
    plugin_set, policies = build_policies(plugin_set, tolerate=True)
    problems: List[str] = [f.message for f in plugin_set.failures]

    def fault(ndt: int, exc: Exception) -> None:
        problems.append(str(exc) + ("" if args.num_draft_tokens else f" (found at a default ndt; `check -n {ndt}` shows it alone)"))

    from .engine.algorithm import checking
    from .serving.prediction import predict  # imports SGLang only if it is installed

    with checking(policies):  # the plugins' validators and factories ask policy_for, as in a server
        ndts = {name: tuple(args.num_draft_tokens) or ndt_grid.accepted(plugin_set.algorithms[name],
                                                                        ndt_grid.grid(plugin_set.algorithms[name]))
                for name in policies}
        checked = {name: answers.table(policy, ndts[name], fault) for name, policy in policies.items()}
        sglang = predict(plugin_set, policies, args.num_draft_tokens, args.disable_overlap_schedule,
                         args.attention_backend, args.enable_dp_attention or args.attn_dp_size > 1, args.model_path,
                         args.speculative_draft_model_path, args.cuda_graph_bs)
    problems += sglang["problems"]
    data = fingerprint_data(plugin_set, policies, sglang["version"])
    digest = fingerprint_digest(data)
    problems += agreement.compare(digest, [answer for policy in policies.values() for answer in policy.answers],
                                  inputs=as_json(data))
    if not args.single_process:
        problems += _compare_with_fresh_process(args.path, ndts, sglang["version"], digest, checked, problems)
    for name, entry in checked.items():
        acceptance = plugin_set.algorithms[name].config.widths_by_acceptance
        if acceptance is not None:
            entry["widths_by_acceptance"] = acceptance.as_plain()
        if args.cuda_graph_bs:
            _add_graph_costs(policies[name], entry, args)
    data = {"config": plugin_set.config.origin, "ok": not problems, "problems": problems,
            "notes": [*plugin_set.shadowed.values(), *plugin_set.notes],
            "algorithms": checked, "sglang": {k: v for k, v in sglang.items() if k not in ("problems", "not_run")},
            "not_run": sglang["not_run"], "fingerprint": digest}
    if args.json:
        _print_json(args, data)
        return 0 if not problems else 1
    _say(args, f"config: {data['config']}")
    for info in plugin_set.plugins:
        _say(args, f"plugin {info.label}: ok")
    for name, entry in checked.items():
        widths = ", ".join(f"ndt={n}: target {w['target']}" + (f", draft {w['draft']}" if "draft" in w else "") + f", max {w['max']}"
                           + "".join(f", {k.replace('_', ' ')} {_buckets_text(w[k])}"
                                     + (f" ({_CHOSEN_TEXT[w[answers.CHOSEN_BY[draft]]]})" if answers.CHOSEN_BY[draft] in w else "")
                                     for draft, k in answers.BY_BATCH_SIZE.items() if k in w)
                           + "".join(f" ({_graphs_text(w[k])})" for k in _GRAPHS.values() if k in w)
                           for n, w in entry["widths"].items())
        _say(args, f"algorithm {name} (plugin {entry['plugin']}): draft-may-verify={entry['draft_may_verify']}" + (f"; {widths}" if widths else ""))
    if not args.num_draft_tokens and checked:
        _say(args, "widths checked at every default ndt the algorithm accepts; pass --num-draft-tokens N for your server's "
                   "(and the SGLang checks that need it)")
    if sglang.get("cpu_harness"):
        _say(args, sglang["cpu_harness"])
    _say(args, f"SGLang: {sglang['summary']}")
    for line in sglang["lines"]:
        _say(args, f"  {line}")
    for name, per_ndt in sglang["backends"].items():
        for ndt, per_worker in per_ndt.items():
            for worker, per_backend in per_worker.items():
                for backend, support in per_backend.items():
                    _say(args, f"  {name} at ndt={ndt}, {worker}, {backend}: {support['verdict']}: {support['reason']}")
    for note in data["notes"]:
        _say(args, f"note: {note}")
    _say(args, f"fingerprint: {digest}")
    for problem in problems:
        print(f"error: {printable(problem)}", file=sys.stderr)
    if problems:
        _say(args, f"{len(problems)} problem(s)")
    else:
        _say(args, "ok, except what was not run here (SGLang is not installed)" if data["not_run"] else "ok")
    return 0 if not problems else 1


def _compare_with_fresh_process(path: Optional[Path], ndts: Dict[str, Tuple[int, ...]], sglang_version: Optional[str],
                                digest: str, checked: Dict[str, Any], problems: List[str]) -> List[str]:
    """Ask everything again in a new interpreter (:func:`~.answers.in_fresh_process`);
    another fingerprint, other widths or other problems mean some answer depends
    on the process (as it would between SGLang's ranks)."""
    try:
        other = answers.in_fresh_process(path, ndts, sglang_version)
    except answers.FreshProcessFailed as exc:
        return [f"the same check in a fresh process {exc}"]
    found = []
    if other["fingerprint"] != digest:
        found.append(f"a fresh process got other answers (fingerprint {other['fingerprint']} instead of {digest}): "
                     "some plugin's answers depend on the process; SGLang's ranks would disagree")
    for name, entry in checked.items():
        theirs = other["tables"].get(name, {}).get("widths")
        if theirs is not None and theirs != entry["widths"]:
            found.append(f"algorithm {name} (plugin {entry['plugin']}): a fresh process got other widths ({theirs} "
                         f"instead of {entry['widths']}): its answers depend on the process; SGLang's ranks would disagree")
    here = {_without_addresses(p) for p in problems}
    return found + [f"only in a fresh process: {p}" for p in other["problems"] if _without_addresses(p) not in here]


def _without_addresses(problem: str) -> str:
    """A problem without object addresses (``<... at 0x7f...>`` differs in every process)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", problem)


def _request_kinds() -> str:
    from .engine.request_kinds import summary
    from .engine.worker_contract import contract

    return summary(contract())


def _dflash_sites() -> Dict[str, Any]:
    from .engine.dflash_sites import summary

    return summary()


def _doctor(args: argparse.Namespace) -> int:
    from .engine.cpu_harness import prepare
    from .engine.probe import probe

    harness = prepare()
    found = probe()
    plans, backends, problems = {}, {}, list(found.problems())
    if not problems:
        from .patches import serving_plans
        from .patches.attention_support import report

        plans, problems = serving_plans(found)
        backends = report(found)
    allowed = os.environ.get("SGLANG_PLUGINS", "")
    if allowed.strip() and LOADER_ENTRY_POINT not in {n.strip() for n in allowed.split(",")}:
        problems.append(f"SGLANG_PLUGINS={allowed} leaves out {LOADER_ENTRY_POINT}: SGLang will not start the loader, "
                        "so no plugin algorithm is registered; add it to the list")
    digest = None
    skipped: List[str] = []
    try:
        plugin_set, policies = loader.resolve()  # as the loader: on_error = "skip" drops, "fail" stops
        described = _describe(plugin_set)
        skipped = [f.message for f in plugin_set.failures]
        digest = fingerprint(plugin_set, policies, found.version)
    except SpecPluginError as exc:
        described = None
        problems += _problems_of(exc)
    would_register = sorted(described["algorithms"]) if described and not problems else []
    problems += [f"skipped (on_error = \"skip\"): {message}" for message in skipped]
    data = {
        "sglang": {
            "version": found.version,
            "import_error": found.import_error,
            "plugin_framework": found.plugin_framework,
            "algorithm_registry": found.registry,
            "register_classmethod": found.register_classmethod,
            "width_hooks": list(found.width_hooks),
            "draft_verify_check": found.draft_check,
            "reserved_names": sorted(found.reserved_names),
            "methods_taken_from_enum": list(found.enum_only_methods),
            "graph_runner": found.graph_runner,
            "dummy_run": found.dummy_run,
            "cpu_harness": harness,
            "dflash_sites": _dflash_sites() if found.installed else {},
            "request_kinds": _request_kinds() if found.installed and not found.problems() else None,
        },
        "patches": {name: {"verdict": _verdict(name, plan.verdict), "reason": plan.reason} for name, plan in plans.items()},
        "attention_backends": backends,
        "config": described["config"] if described else None,
        "plugins": described["plugins"] if described else [],
        "notes": described["notes"] if described else [],
        "would_register": would_register,
        "fingerprint": digest,
        "problems": problems,
        "ok": not problems,
    }
    if args.json:
        _print_json(args, data)
    else:
        s = data["sglang"]
        _say(args, f"SGLang: {s['version'] or 'not installed'}")
        if harness:
            _say(args, f"  {harness}")
        if found.import_error:
            _say(args, f"  import failed: {found.import_error}")
        elif found.installed:
            _say(args, f"  plugin framework (sglang.srt.plugins): {'yes' if s['plugin_framework'] else 'no'}")
            _say(args, f"  algorithm registry (spec_registry):     {'yes' if s['algorithm_registry'] else 'no'}")
            _say(args, f"  width hook(s) the runners call:          {', '.join(s['width_hooks']) or 'none'}")
            _say(args, f"  draft-worker verify check:               {'supports_target_verify_for_draft' if s['draft_verify_check'] else 'none'}")
            _say(args, f"  enum methods plugin algorithms inherit:  {', '.join(s['methods_taken_from_enum']) or 'none'}")
            _say(args, f"  decode CUDA-graph runner:                {s['graph_runner'] or 'not found'}")
            _say(args, f"  dummy run:                               {s['dummy_run'] or 'not found'}")
            if s["request_kinds"]:
                _say(args, f"  request kinds (the worker bases):        {s['request_kinds']}")
            sites = s["dflash_sites"]
            if sites:
                refused = ", ".join(f"{n} with {c}" for c, n in sorted(sites["refused"].items())) or "none"
                _say(args, f"  DFLASH-only sites (draft-model plugins): {sites['served']} served from the declaration, "
                           f"{sites['answered']} answered, refused: {refused}; unexamined: "
                           f"{', '.join(sites['unexamined']) or 'none'}")
        for name, plan in data["patches"].items():
            _say(args, f"patch {name}: {plan['verdict']}: {plan['reason']}")
        for name, support in backends.items():
            _say(args, f"plugin algorithms on {name.split('.', 1)[1]}: {support}")
        _say(args, f"config: {data['config']}")
        for plugin in data["plugins"]:
            _say(args, f"plugin {plugin['name']} ({plugin['distribution']}=={plugin['version']})")
        for note in data["notes"]:
            _say(args, f"note: {note}")
        _say(args, f"the loader would register: {', '.join(data['would_register']) or 'nothing'}")
        _say(args, f"fingerprint: {digest or '-'}")
        for problem in problems:
            _say(args, f"problem: {problem}")
        _say(args, "ok" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


def _verdict(name: str, planned) -> str:
    """A plan's :class:`~.patches.unit.Verdict` as doctor says it: "applied" when
    this process already applied the patch, "would apply" when the loader would."""
    from .patches import PATCHES, Verdict

    if planned != Verdict.APPLY:
        return str(planned)

    return "applied" if next(p for p in PATCHES if p.name == name).applied else "would apply"


def _describe(plugin_set: PluginSet) -> Dict[str, Any]:
    def where(name: str) -> Dict[str, Any]:
        info = plugin_set.info(name)
        return {"plugin": name, "distribution": info.distribution, "version": info.version, "module_file": info.module_file}

    hooks: Dict[str, List[Dict[str, Any]]] = {}
    for name in sorted(n for n in dir(plugin_set.pm.hook) if n.startswith("sgl_spec_")):
        hooks[name] = [where(impl.plugin_name) for impl in getattr(plugin_set.pm.hook, name).get_hookimpls()]
    return {
        "config": plugin_set.config.origin,
        "plugins": [
            {"name": p.name, "distribution": p.distribution, "version": p.version, "module_file": p.module_file,
             "hooks": sorted(h for h, impls in hooks.items() if any(i["plugin"] == p.name for i in impls))}
            for p in plugin_set.plugins
        ],
        "hooks": hooks,
        "algorithms": {
            name: {**where(offered.plugin), "supports_overlap": offered.spec.supports_overlap,
                   "verify_shape": offered.spec.verify_shape, "capabilities": dict(offered.spec.capabilities),
                   "settings": config_mod.plain(offered.config.settings)}
            for name, offered in plugin_set.algorithms.items()
        },
        "failures": [{"plugin": f.plugin, "message": f.message} for f in plugin_set.failures],
        "notes": [*plugin_set.shadowed.values(), *plugin_set.notes],
    }


def _problems_of(exc: SpecPluginError) -> List[str]:
    return list(getattr(exc, "problems", None) or [str(exc)])


def _fail(args: argparse.Namespace, problems: List[str]) -> int:
    if getattr(args, "json", False):
        _print_json(args, {"ok": False, "problems": problems})
    else:
        for problem in problems:
            print(f"error: {printable(problem)}", file=sys.stderr)
    return 1


def _print_json(args: argparse.Namespace, data: Any) -> None:
    json.dump(data, args.out, indent=2, default=str)
    args.out.write("\n")
    args.out.flush()
