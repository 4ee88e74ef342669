"""Start-up: what the loader adds to a fresh SGLang process, with 10 plugins
installed, and what the start-up check costs when SGLang resolves its arguments.

Each measurement is a fresh Python process on the real SGLang source (CPU
harness, ``sglang_spec_plugins.testing.cpu``) that first imports what SGLang itself has
imported when it calls ``load_plugins()``, then times ``load_plugins()``:

* ``launcher``: ``sglang.srt.server_args`` and ``sglang.srt.plugins`` (the
  launcher, detokenizer, DP controller): the patch targets are not imported,
  so patches are planned and wait for their module's import;
* ``scheduler``: a scheduler process as SGLang starts one:
  ``sglang.srt.managers.scheduler`` imported (``run_scheduler_process``
  calls ``load_plugins()`` there; it holds the graph runners, not the model
  runner or any attention backend), ``load_plugins()`` timed, then the
  modules SGLang imports when it builds the model runner with one attention
  backend (``--backend``; FA3 by default, SGLang's choice for an MHA model on
  an H200): the patches waiting for them are installed at their import, and
  that time (inside this package's import hook) is the loader's too;
* ``all_targets``: every module a patch targets imported first, all four
  patched attention backends included (no server imports them all), so that
  every patch is installed inside ``load_plugins()``: the bound.

Two modes per scenario, alternated, each ``--repeat`` times: ``sglang``
(``SGLANG_PLUGINS`` names no installed plugin: SGLang's own
``load_plugins()``, entry-point scan and hook application) and ``plugins``
(our loader, 10 installed drafter plugins written by ``tests/dists.py``, each
offering one algorithm, all enabled in a generated plugins.toml). A first
round, not counted, writes the bytecode caches an installed package has. Ours is the
median of ``load_plugins()`` plus the later installs (a scheduler's) less
SGLang's median; inside the ``plugins`` runs the child also times our entry
point's call alone and, after it, one re-planning of every patch from cold
source caches.

``check``: a process that has imported what ``sglang.Engine`` has imported
when it resolves its arguments (``sglang.srt.entrypoints.engine``;
``launch_server`` imports it right after), loads the example PROMPT_LOOKUP
plugin through ``load_plugins()`` and resolves ``--speculative-algorithm
PROMPT_LOOKUP --speculative-num-draft-tokens 4 --disable-overlap-schedule``
through SGLang's own speculative-argument handler, timing the
``validate_server_args`` the loader registered (the plugin's validator, the
worker contract, the worker factory and its class, the widths, the
backends). Three cache states (``engine/source_cache.py``), each in its own
processes: ``off`` (``SGLANG_SPEC_PLUGINS_CACHE=off``: the contract is read
off the source every time), ``cold`` (an empty cache directory: read and
written, the first start after an install) and ``warm`` (the entry another
process wrote). Each child records the 1-minute load average it started at.

``--against DIR`` adds a third mode to each round: the loader (and the
check) of another revision (DIR holds its ``sglang_spec_plugins`` package,
first on ``sys.path``), so that two revisions are compared on the same host
in the same minutes rather than across runs (a host's speed changes by
10-20% from one hour to the next).

    .venv/bin/python benchmarks/startup.py --out benchmarks/results/startup.json
    git archive REV sglang_spec_plugins | tar -x -C DIR
    .venv/bin/python benchmarks/startup.py --against DIR --out benchmarks/results/startup.json
    python3 benchmarks/startup.py --only loader --host --backend flashinfer_backend --out F  (a GPU machine:
        tools/gpu/engine/run.sh setup startup)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = 10
NO_PLUGIN = "none-selected"  # SGLANG_PLUGINS value that matches no installed plugin
LOADER_SCENARIOS = ("launcher", "scheduler", "all_targets")
ATTENTION = "sglang.srt.layers.attention."
SCHEDULER = "sglang.srt.managers.scheduler"
CACHE_STATES = ("off", "cold", "warm")
CHECK_TOML = """[plugins]
enable = ["prompt_lookup"]
[algorithms.PROMPT_LOOKUP]
max_tokens_per_req = 4
widths_by_batch_size = {1 = 4, 8 = 2}
"""
CHECK_ARGS = dict(speculative_algorithm="PROMPT_LOOKUP", speculative_num_draft_tokens=4, disable_overlap_schedule=True,
                  attention_backend="flashinfer")  # a CPU resolves torch_native, which widths by batch size refuse


def write_plugins(site: Path) -> Path:
    """10 installed drafter distributions in ``site`` and a plugins.toml enabling them."""
    from dists import make_dist, simple_plugin

    names = [f"bench{i}" for i in range(PLUGINS)]
    for i, name in enumerate(names):
        make_dist(site, f"bench-drafter-{i}", {name: f"bench_drafter_{i}"},
                  {f"bench_drafter_{i}": simple_plugin(f"BENCH{i}", width="min(num_draft_tokens, 4)", max_width="16")})
    toml = site / "plugins.toml"
    toml.write_text("[plugins]\nenable = [" + ", ".join(f'"{n}"' for n in names) + "]\n"
                    + "".join(f"[algorithms.BENCH{i}]\nmax_tokens_per_req = 16\n" for i in range(PLUGINS)))
    return toml


def target_modules(host: bool) -> list:
    """Every SGLang module a patch (or the probe) reads, that the installed release has."""
    from importlib.util import find_spec

    from sglang_spec_plugins.engine.probe import DUMMY_RUN_LOCATIONS, GRAPH_RUNNER_LOCATIONS
    from sglang_spec_plugins.patches import PATCHES

    names = {t.module for p in PATCHES for t in p.alternatives}
    names |= {m for m, _ in GRAPH_RUNNER_LOCATIONS + DUMMY_RUN_LOCATIONS}
    if not host:
        _cpu_stand_ins().install_stand_ins()  # find_spec imports the parent packages
    present = []
    for name in sorted(names):
        try:
            if find_spec(name) is not None:
                present.append(name)
        except ModuleNotFoundError:
            pass
    return present


def child(scenario: str, modules: list, backend: str, host: bool) -> None:
    """One fresh process: import SGLang's part, time load_plugins() (and, in a
    scheduler, the patches installed when the model runner's modules are
    imported after it), print JSON. ``host``: SGLang and its kernels as
    installed (a GPU machine), no CPU stand-ins."""
    import importlib

    if not host:
        cpu = _cpu_stand_ins()
        cpu.install_stand_ins()
        # The FA3 backend imports the CUDA-only sgl_kernel unguarded at its top (a GPU server has it).
        cpu.absent_kernel_package(_SetItem(), "sgl_kernel")
    started = time.perf_counter()
    importlib.import_module("sglang.srt.server_args")
    plugins = importlib.import_module("sglang.srt.plugins")
    for name in {"launcher": [], "scheduler": [SCHEDULER], "all_targets": modules}[scenario]:
        importlib.import_module(name)
    sglang_import_s = time.perf_counter() - started
    for ours in ("sglang_spec_plugins", "pluggy"):  # what only this package imports is its to pay for
        assert ours not in sys.modules, f"{ours} must not be imported before load_plugins()"

    entry_s = {}
    by_group = plugins.load_plugins_by_group

    def timed_group(*args, **kwargs):
        found = by_group(*args, **kwargs)
        return {name: (_timed(func, name, entry_s), dist) for name, (func, dist) in found.items()}

    plugins.load_plugins_by_group = timed_group
    collections = _GarbageCollections()
    gc.callbacks.append(collections)
    started = time.perf_counter()
    plugins.load_plugins()
    load_s = time.perf_counter() - started
    gc.callbacks.remove(collections)
    result = dict(sglang_import_ms=sglang_import_s * 1e3, load_plugins_ms=load_s * 1e3,
                  entry_point_ms=entry_s.get("sglang_spec_plugins", 0.0) * 1e3, load_1m=os.getloadavg()[0],
                  gc_ms=collections.ms, gc_full=collections.full, deferred_ms=0.0)
    ours = "sglang_spec_plugins" in sys.modules
    if ours:
        from sglang_spec_plugins.loader import load
        from sglang_spec_plugins.patches.deferred import waiting

        report = load()  # the report of the load that just ran

        def installed() -> int:  # the applying patches no longer waiting for their module's import
            return sum(p.verdict == "apply" and not waiting(n) for n, p in report.patches.items())

        result["package"] = str(Path(sys.modules["sglang_spec_plugins"].__file__).resolve().parent.parent)
        result["registered"] = len(report.registered)
        result["patches"] = {v: sum(p.verdict == v for p in report.patches.values()) for v in ("apply", "not needed")}
        result["applied_now"] = installed()
    if scenario == "scheduler":
        later = [m for m in modules if not m.startswith(ATTENTION)] + [ATTENTION + backend]
        hook = _ImportHookTime() if ours else None
        started = time.perf_counter()
        for name in later:
            importlib.import_module(name)
        result["later_import_ms"] = (time.perf_counter() - started) * 1e3
        if hook:
            result["deferred_ms"] = hook.stop()
            result["applied_later"] = installed() - result["applied_now"]
    if ours:
        from sglang_spec_plugins.engine import probe, source_text
        from sglang_spec_plugins.patches import PATCHES, plan_all

        probe.source_in.cache_clear()
        source_text._read.cache_clear()
        started = time.perf_counter()
        plan_all(PATCHES, report.sglang_version)
        result["replan_cold_ms"] = (time.perf_counter() - started) * 1e3
    print(json.dumps(result))


class _ImportHookTime:
    """The time spent in this package's after-import callbacks (installing the
    patches that waited for a module) from now until :meth:`stop`."""

    def __init__(self):
        from sglang_spec_plugins.patches import on_import

        self.ms, self._loader = 0.0, on_import._Loader
        self._exec = exec_module = self._loader.exec_module

        def timed_callbacks(loader, module):
            loader.callbacks = [self._timed(callback) for callback in loader.callbacks]
            exec_module(loader, module)

        self._loader.exec_module = timed_callbacks

    def _timed(self, callback):
        def run(module):
            started = time.perf_counter()
            try:
                return callback(module)
            finally:
                self.ms += (time.perf_counter() - started) * 1e3

        return run

    def stop(self) -> float:
        self._loader.exec_module = self._exec
        return self.ms


def check_child() -> None:
    """One fresh process: import what sglang.Engine has imported, load the
    PROMPT_LOOKUP plugin, time the start-up check inside SGLang's own argument
    resolution, print JSON."""
    import importlib

    load_1m = os.getloadavg()[0]
    cpu = _cpu_stand_ins()
    cpu.install_stand_ins()
    importlib.import_module("sglang.srt.entrypoints.engine")
    importlib.import_module("sglang.srt.plugins").load_plugins()
    from sglang.srt.speculative import spec_registry

    from on_sglang.bad_inputs import resolve_server_args

    algorithm = spec_registry.get_spec(CHECK_ARGS["speculative_algorithm"])
    validate, took = algorithm.validate_server_args, {}

    def timed(server_args):
        started = time.perf_counter()
        try:
            return validate(server_args)
        finally:
            took["check_ms"] = (time.perf_counter() - started) * 1e3

    algorithm.validate_server_args = timed
    started = time.perf_counter()
    resolve_server_args(**CHECK_ARGS)
    print(json.dumps(dict(took, resolve_ms=(time.perf_counter() - started) * 1e3, load_1m=load_1m)))


class _SetItem:
    """What ``absent_kernel_package`` asks of pytest's ``monkeypatch``, without importing pytest: pytest imports
    pluggy, which in a server only this package imports, so the loader's time must include it."""

    @staticmethod
    def setitem(mapping, key, value):
        mapping[key] = value


def _cpu_stand_ins():
    """The CPU harness's stand-ins (``sglang_spec_plugins/testing/cpu.py``), loaded
    from their files under a package of another name, so that the child does
    not import our package (pluggy, the config reader, ...) before
    ``load_plugins()`` does."""
    import importlib.util
    import types

    package = ROOT / "sglang_spec_plugins"
    for name in ("_bench", "_bench.engine", "_bench.testing"):
        sys.modules.setdefault(name, types.ModuleType(name)).__path__ = []

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    load("_bench.engine.cpu_harness", package / "engine" / "cpu_harness.py")
    return load("_bench.testing.cpu", package / "testing" / "cpu.py")


class _GarbageCollections:
    """A ``gc.callbacks`` entry adding up the time Python's cyclic collector
    ran (``ms``) and how many of its runs were full ones (``full``: generation
    2, which walks every object the process holds, SGLang's included)."""

    def __init__(self):
        self.ms, self.full, self._started = 0.0, 0, 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.ms += (time.perf_counter() - self._started) * 1e3
            self.full += info["generation"] == 2


def _timed(func, name, into):
    def run():
        started = time.perf_counter()
        try:
            return func()
        finally:
            into[name] = time.perf_counter() - started

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", choices=("loader", "check"), help="run one half")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="also time, in the same rounds, the loader of another revision: DIR holds its "
                             "sglang_spec_plugins package (git archive REV sglang_spec_plugins | tar -x -C DIR)")
    parser.add_argument("--backend", default="flashattention_backend",
                        help="the scheduler's attention backend module (default: %(default)s, FA3)")
    parser.add_argument("--host", action="store_true",
                        help="SGLang and its kernels as installed here (a GPU machine), without the CPU harness's "
                             "stand-ins; the loader only")
    parser.add_argument("--child", choices=(*LOADER_SCENARIOS, "check"), help=argparse.SUPPRESS)
    parser.add_argument("--modules", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host and not args.child and args.only != "loader":
        parser.error("--host times the loader only (the check reads the CPU harness's arguments): add --only loader")
    sys.path.insert(0, str(ROOT / "tests"))
    if args.child == "check":
        return check_child()
    if args.child:
        return child(args.child, args.modules, args.backend, args.host)

    modules = target_modules(args.host)
    ours_here = _our_package()
    load_before = os.getloadavg()[0]  # a shared machine: other processes' load inflates every number
    uptime_before = _uptime()
    runs = {}
    loader, check = args.only in (None, "loader"), args.only in (None, "check")
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp, "site")  # on sys.path: the cache folders made and removed below stay out of it
        site.mkdir()
        toml = write_plugins(site)
        check_toml = Path(tmp, "check", "plugins.toml")
        check_toml.parent.mkdir()
        check_toml.write_text(CHECK_TOML)
        base_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
        base_env.pop("SGLANG_SPEC_PLUGINS", None)
        base_env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files (pip writes them)
        warm_cache = Path(tmp, "cache-warm")
        for rep in range(args.repeat + 1):  # the first round writes the bytecode caches and is not counted
            for scenario in LOADER_SCENARIOS if loader else ():
                for mode in ("sglang", "plugins", "against") if args.against else ("sglang", "plugins"):
                    env = dict(base_env, SGLANG_SPEC_PLUGINS_CONFIG=str(toml), SGLANG_SPEC_PLUGINS_CACHE=str(warm_cache))
                    if mode == "sglang":
                        env["SGLANG_PLUGINS"] = NO_PLUGIN
                    else:
                        env.pop("SGLANG_PLUGINS", None)
                    if mode == "against":  # its package first on sys.path: found before this checkout's
                        env["PYTHONPATH"] = os.pathsep.join([str(args.against.resolve()), env["PYTHONPATH"]])
                    row = _run_child(env, tmp, scenario, *(["--host"] if args.host else []), "--backend", args.backend,
                                     "--modules", *modules)
                    if rep:
                        runs.setdefault((scenario, mode), []).append(row)
            for state in CACHE_STATES if check else ():
                for mode in ("plugins", "against") if args.against else ("plugins",):
                    cold_cache = Path(tmp, f"cache-cold-{rep}")
                    cache = {"off": "off", "cold": str(cold_cache), "warm": str(warm_cache)}[state]
                    env = dict(base_env, SGLANG_SPEC_PLUGINS_CONFIG=str(check_toml), SGLANG_SPEC_PLUGINS_CACHE=cache)
                    env.pop("SGLANG_PLUGINS", None)
                    if mode == "against":
                        env["PYTHONPATH"] = os.pathsep.join([str(args.against.resolve()), env["PYTHONPATH"]])
                    row = _run_child(env, check_toml.parent, "check")
                    shutil.rmtree(cold_cache, ignore_errors=True)
                    if rep:
                        runs.setdefault(("check", state) if mode == "plugins" else ("check_against", state), []).append(row)

    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    summary = {}
    for scenario in LOADER_SCENARIOS if loader else ():
        ours, base = runs[(scenario, "plugins")], runs[(scenario, "sglang")]
        summary[scenario] = {
            "sglang_import_ms": round(med(base, "sglang_import_ms")),
            "sglang_load_plugins_ms": round(med(base, "load_plugins_ms"), 1),
            "load_plugins_with_ours_ms": round(med(ours, "load_plugins_ms"), 1),
            "deferred_installs_ms": round(med(ours, "deferred_ms"), 1),
            "added_by_ours_ms": round(_added(ours, base), 1),
            "our_entry_point_call_ms": round(med(ours, "entry_point_ms"), 1),
            "garbage_collection_ms": {"sglang": round(med(base, "gc_ms"), 1), "with_ours": round(med(ours, "gc_ms"), 1)},
            "full_collections": {"sglang": sum(r["gc_full"] for r in base), "with_ours": sum(r["gc_full"] for r in ours)},
            "replan_every_patch_cold_ms": round(med(ours, "replan_cold_ms"), 1),
            "registered_algorithms": ours[0]["registered"],
            "patch_verdicts": ours[0]["patches"],
            "patches_installed_inside_load": ours[0]["applied_now"],
            "patches_installed_later": ours[0].get("applied_later", 0),
        }
        if scenario == "scheduler":
            summary[scenario]["backend"] = args.backend
        assert {r["package"] for r in ours} == {ours_here}, f"the package this process imports ({ours_here}) did not run"
        if args.against:
            other = runs[(scenario, "against")]
            assert {r["package"] for r in other} == {str(args.against.resolve())}, "the other revision's package did not run"
            summary[scenario]["against"] = {
                "package": str(args.against), "load_plugins_with_it_ms": round(med(other, "load_plugins_ms"), 1),
                "deferred_installs_ms": round(med(other, "deferred_ms"), 1), "added_by_it_ms": round(_added(other, base), 1),
                "its_entry_point_call_ms": round(med(other, "entry_point_ms"), 1),
            }
    for state in CACHE_STATES if check else ():
        rows = runs[("check", state)]
        summary[f"check_cache_{state}"] = {
            "check_ms": round(med(rows, "check_ms"), 1), "check_ms_range": [round(min(r["check_ms"] for r in rows), 1),
                                                                             round(max(r["check_ms"] for r in rows), 1)],
            "resolve_ms": round(med(rows, "resolve_ms"), 1),
        }
        if args.against:
            other = runs[("check_against", state)]
            summary[f"check_cache_{state}"]["against"] = {
                "package": str(args.against), "check_ms": round(med(other, "check_ms"), 1),
                "check_ms_range": [round(min(r["check_ms"] for r in other), 1), round(max(r["check_ms"] for r in other), 1)]}
    loads = [r["load_1m"] for rows in runs.values() for r in rows]
    print(f"load average (1 min) at the children's start: {min(loads):.2f} to {max(loads):.2f}")
    if loader:
        print(f"{'scenario':<12}{'SGLang load_plugins':>21}{'with ours':>11}{'later':>7}{'added':>8}{'our call':>10}"
              f"{'plan':>7}{'gc with ours':>14}{'full gc':>9}  (ms, medians of {args.repeat}; later: patches installed at a"
              " later import; full gc: how many runs)")
        for scenario in LOADER_SCENARIOS:
            s = summary[scenario]
            print(f"{scenario:<12}{s['sglang_load_plugins_ms']:>21}{s['load_plugins_with_ours_ms']:>11}"
                  f"{s['deferred_installs_ms']:>7}{s['added_by_ours_ms']:>8}{s['our_entry_point_call_ms']:>10}"
                  f"{s['replan_every_patch_cold_ms']:>7}{s['garbage_collection_ms']['with_ours']:>14}"
                  f"{s['full_collections']['with_ours']:>9}")
            if args.against:
                a = s["against"]
                print(f"{'  against':<12}{'':>21}{a['load_plugins_with_it_ms']:>11}{a['deferred_installs_ms']:>7}"
                      f"{a['added_by_it_ms']:>8}{a['its_entry_point_call_ms']:>10}  ({args.against}, in the same rounds)")
    for state in CACHE_STATES if check else ():
        s = summary[f"check_cache_{state}"]
        print(f"start-up check, cache {state:<5} {s['check_ms']:>8} ms (range {s['check_ms_range'][0]} to "
              f"{s['check_ms_range'][1]}), SGLang's whole speculative-argument resolution {s['resolve_ms']} ms")
        if args.against:
            a = s["against"]
            print(f"  against {a['check_ms']:>24} ms (range {a['check_ms_range'][0]} to {a['check_ms_range'][1]}), "
                  f"{args.against}, in the same rounds")
    if args.out:
        import sglang
        import torch

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(),
                        "python": platform.python_version(), "sglang": sglang.__version__, "torch": torch.__version__,
                        "sglang_spec_plugins": _our_version(),
                        "uptime_before_after": [uptime_before, _uptime()],
                        "load_average_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                        "load_average_1m_at_children": [round(min(loads), 2), round(max(loads), 2)]},
            "plugins_installed": PLUGINS, "repeat": args.repeat, "summary": summary,
            "runs": {f"{s}/{m}": rows for (s, m), rows in runs.items()},
        }, indent=1) + "\n")


def _added(ours, base) -> float:
    """What the loader adds to a process: the median of ``load_plugins()`` plus the patches installed at a later
    import (a scheduler's), less the median of SGLang's own ``load_plugins()``."""
    return statistics.median(r["load_plugins_ms"] + r["deferred_ms"] for r in ours) \
        - statistics.median(r["load_plugins_ms"] for r in base)


def _run_child(env, cwd, scenario, *extra) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", scenario, *extra], env=env, cwd=cwd,
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{scenario} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _our_package() -> str:
    """The folder holding the ``sglang_spec_plugins`` this process imports (this checkout's, or an installed wheel's)."""
    import sglang_spec_plugins

    return str(Path(sglang_spec_plugins.__file__).resolve().parent.parent)


def _our_version() -> str:
    from importlib import metadata

    return metadata.version("sglang-spec-plugins")


if __name__ == "__main__":
    main()
