"""Start-up: what the loader adds to a fresh SGLang process, with 10 plugins installed.

Each measurement is a fresh Python process on the real SGLang source (CPU
harness, ``sglang_spec_plugins.testing.cpu``) that first imports what SGLang itself has
imported when it calls ``load_plugins()``, then times ``load_plugins()``:

* ``launcher``: ``sglang.srt.server_args`` and ``sglang.srt.plugins`` (the
  launcher, detokenizer, DP controller): the patch targets are not imported,
  so patches are planned and wait for their module's import;
* ``scheduler``: also every module a patch targets (the attention backends,
  the CUDA-graph runner, the model runner), as in a scheduler process:
  patches are planned and applied inside ``load_plugins()``.

Two modes per scenario, alternated, each ``--repeat`` times: ``sglang``
(``SGLANG_PLUGINS`` names no installed plugin: SGLang's own
``load_plugins()``, entry-point scan and hook application) and ``plugins``
(our loader, 10 installed drafter plugins written by ``tests/dists.py``, each
offering one algorithm, all enabled in a generated plugins.toml). A first
round, not counted, writes the bytecode caches an installed package has. Ours is the
difference of the medians; inside the ``plugins`` runs the child also times
our entry point's call alone and, after it, one re-planning of every patch
from cold source caches.

    .venv/bin/python benchmarks/startup.py --out benchmarks/results/startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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


def target_modules() -> list:
    """Every SGLang module a patch (or the probe) reads, that the installed release has."""
    from importlib.util import find_spec

    from sglang_spec_plugins.engine.probe import DUMMY_RUN_LOCATIONS, GRAPH_RUNNER_LOCATIONS
    from sglang_spec_plugins.patches import PATCHES

    names = {t.module for p in PATCHES for t in p.alternatives}
    names |= {m for m, _ in GRAPH_RUNNER_LOCATIONS + DUMMY_RUN_LOCATIONS}
    _cpu_stand_ins().install_stand_ins()  # find_spec imports the parent packages
    present = []
    for name in sorted(names):
        try:
            if find_spec(name) is not None:
                present.append(name)
        except ModuleNotFoundError:
            pass
    return present


def child(scenario: str, modules: list) -> None:
    """One fresh process: import SGLang's part, time load_plugins(), print JSON."""
    import importlib

    import pytest

    cpu = _cpu_stand_ins()
    cpu.install_stand_ins()
    # The FA3 backend imports the CUDA-only sgl_kernel unguarded at its top (a GPU server has it).
    cpu.absent_kernel_package(pytest.MonkeyPatch(), "sgl_kernel")
    started = time.perf_counter()
    importlib.import_module("sglang.srt.server_args")
    plugins = importlib.import_module("sglang.srt.plugins")
    if scenario == "scheduler":
        for name in modules:
            importlib.import_module(name)
    sglang_import_s = time.perf_counter() - started
    assert "sglang_spec_plugins" not in sys.modules, "our package must not be imported before load_plugins()"

    entry_s = {}
    by_group = plugins.load_plugins_by_group

    def timed_group(*args, **kwargs):
        found = by_group(*args, **kwargs)
        return {name: (_timed(func, name, entry_s), dist) for name, (func, dist) in found.items()}

    plugins.load_plugins_by_group = timed_group
    started = time.perf_counter()
    plugins.load_plugins()
    load_s = time.perf_counter() - started
    result = dict(sglang_import_ms=sglang_import_s * 1e3, load_plugins_ms=load_s * 1e3,
                  entry_point_ms=entry_s.get("sglang_spec_plugins", 0.0) * 1e3)
    if "sglang_spec_plugins" in sys.modules:
        from sglang_spec_plugins.engine import probe, source_text
        from sglang_spec_plugins.loader import load
        from sglang_spec_plugins.patches import PATCHES, plan_all

        report = load()  # the report of the load that just ran
        result["registered"] = len(report.registered)
        result["patches"] = {v: sum(p.verdict == v for p in report.patches.values()) for v in ("apply", "not needed")}
        result["applied_now"] = sum(bool(p._originals) for p in PATCHES)
        probe.method_source.cache_clear()
        source_text._text.cache_clear()
        started = time.perf_counter()
        plan_all(PATCHES, report.sglang_version)
        result["replan_cold_ms"] = (time.perf_counter() - started) * 1e3
    print(json.dumps(result))


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
    parser.add_argument("--child", choices=("launcher", "scheduler"), help=argparse.SUPPRESS)
    parser.add_argument("--modules", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    if args.child:
        return child(args.child, args.modules)

    modules = target_modules()
    load_before = os.getloadavg()[0]  # a shared machine: other processes' load inflates every number
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        toml = write_plugins(Path(tmp))
        for rep in range(args.repeat + 1):  # the first round writes the bytecode caches and is not counted
            for scenario in ("launcher", "scheduler"):
                for mode in ("sglang", "plugins"):
                    env = dict(os.environ, SGLANG_SPEC_PLUGINS_CONFIG=str(toml),
                               PYTHONPATH=os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")])))
                    env.pop("SGLANG_SPEC_PLUGINS", None)
                    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files (pip writes them)
                    if mode == "sglang":
                        env["SGLANG_PLUGINS"] = NO_PLUGIN
                    else:
                        env.pop("SGLANG_PLUGINS", None)
                    out = subprocess.run([sys.executable, __file__, "--child", scenario, "--modules", *modules],
                                         env=env, cwd=tmp, capture_output=True, text=True)
                    if out.returncode:
                        raise SystemExit(f"{scenario}/{mode} child failed:\n{out.stderr[-3000:]}")
                    if rep:
                        runs.setdefault((scenario, mode), []).append(json.loads(out.stdout.strip().splitlines()[-1]))

    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    summary = {}
    for scenario in ("launcher", "scheduler"):
        ours, base = runs[(scenario, "plugins")], runs[(scenario, "sglang")]
        summary[scenario] = {
            "sglang_import_ms": round(med(base, "sglang_import_ms")),
            "sglang_load_plugins_ms": round(med(base, "load_plugins_ms"), 1),
            "load_plugins_with_ours_ms": round(med(ours, "load_plugins_ms"), 1),
            "added_by_ours_ms": round(med(ours, "load_plugins_ms") - med(base, "load_plugins_ms"), 1),
            "our_entry_point_call_ms": round(med(ours, "entry_point_ms"), 1),
            "replan_every_patch_cold_ms": round(med(ours, "replan_cold_ms"), 1),
            "registered_algorithms": ours[0]["registered"],
            "patch_verdicts": ours[0]["patches"],
            "patches_installed_inside_load": ours[0]["applied_now"],
        }
    print(f"{'scenario':<11}{'SGLang load_plugins':>21}{'with ours':>11}{'added':>8}{'our call':>10}{'plan':>7}  (ms, medians of {args.repeat})")
    for scenario, s in summary.items():
        print(f"{scenario:<11}{s['sglang_load_plugins_ms']:>21}{s['load_plugins_with_ours_ms']:>11}"
              f"{s['added_by_ours_ms']:>8}{s['our_entry_point_call_ms']:>10}{s['replan_every_patch_cold_ms']:>7}")
    if args.out:
        import sglang

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "python": platform.python_version(), "sglang": sglang.__version__,
                        "load_average_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)]},
            "plugins_installed": PLUGINS, "repeat": args.repeat, "summary": summary,
            "runs": {f"{s}/{m}": rows for (s, m), rows in runs.items()},
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
