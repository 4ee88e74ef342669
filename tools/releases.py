"""Install SGLang releases side by side and run the SGLang tests on each.

Each release goes, ``--no-deps``, into its own folder ``.sglang/<release>``
beside the shared CPU torch environment, together with the transformers
release it pins and any of that transformers' own requirements the shared
environment does not satisfy (read from the wheels' metadata, not typed in).
A test run puts one folder first on PYTHONPATH.

    python tools/releases.py install 0.5.14 0.5.16     # or --ci / --all
    python tools/releases.py test --ci [-- PYTEST ARGS]
    python tools/releases.py table --all [--check]     # docs/reference: compatibility and backend tables
    python tools/releases.py sites [--check]           # docs/reference/draft-model-sites.md (0.5.14-0.5.23)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ROOT / ".sglang"
WHEELS = TARGETS / "wheels"

CI_RELEASES = ["0.5.12.post1", "0.5.13", "0.5.14", "0.5.16", "0.5.19", "0.5.21", "0.5.23"]
"""The releases .ci/run tests (the default environment's 0.5.23 included)."""

ALL_RELEASES = [
    "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1",
    "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
]
"""Every release in the supported range 0.5.12-0.5.23."""

UNSUPPORTED = ["0.5.10.post1", "0.5.11"]
"""Releases before the range (no plugin framework; no algorithm registry); tests check they are refused."""


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True)


def wheel_requirements(name: str, version: str) -> List[Requirement]:
    """The unconditional requirements in a published wheel's metadata."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    pattern = re.compile(rf"^{name.replace('-', '_')}-{re.escape(version)}-.*\.whl$", re.I)
    found = [p for p in WHEELS.iterdir() if pattern.match(p.name)]
    if not found:
        pip("download", "--no-deps", "--only-binary=:all:", "-d", str(WHEELS), f"{name}=={version}")
        found = [p for p in WHEELS.iterdir() if pattern.match(p.name)]
    with zipfile.ZipFile(found[0]) as wheel:
        meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        lines = wheel.read(meta).decode().splitlines()
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _unsatisfied(reqs: List[Requirement]) -> List[str]:
    out = []
    for req in reqs:
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            continue  # not needed to import what the tests import
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(str(req).split(";")[0])
    return out


def install(release: str) -> Path:
    """Make ``.sglang/<release>`` (idempotent)."""
    target = TARGETS / release
    if (target / ".complete").exists():
        return target
    pins = [f"sglang=={release}"]
    transformers = next((r for r in wheel_requirements("sglang", release) if r.name == "transformers"), None)
    if transformers and str(transformers.specifier).startswith("=="):
        version = str(transformers.specifier)[2:]
        if metadata.version("transformers") != version:
            pins.append(f"transformers=={version}")
            pins += _unsatisfied(wheel_requirements("transformers", version))
    started = time.time()
    pip("install", "--no-deps", "--no-compile", "--target", str(target), *pins)
    (target / ".complete").write_text(" ".join(pins) + "\n")
    print(f"installed {' '.join(pins)} into {target} in {time.time() - started:.0f}s", flush=True)
    return target


def environ_for(release: str) -> Dict[str, str]:
    """The environment of a process that imports ``release`` (the shared
    environment's own release needs no folder)."""
    env = dict(os.environ)
    if release != metadata.version("sglang"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(install(release)), env.get("PYTHONPATH")]))
    return env


RELEASE_DEPENDENT = "sglang and not own_releases and not slow"
"""The tests each release of the matrix runs (unless the command names its own): every test under
tests/on_sglang and every top-level test marked ``sglang`` (what ``check``, ``doctor`` and the kit say
depends on the release), but those that pick their releases themselves and the ``slow`` ones (each
says which faster test guards its logic on every release; the main run, 0.5.23, runs them; name the
file to run one on a release: ``releases.py test 0.5.16 -- tests/on_sglang/test_draft_model_serve.py``)."""


def test(releases: List[str], pytest_args: List[str], jobs: int = 1) -> int:
    """Each release's tests in a pytest process of its own, ``jobs`` at a time: with one, its
    output as it runs; with more, each one's output whole when it ends (torch on one thread each)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    named = any(a.startswith("tests") or a.endswith(".py") for a in pytest_args)
    paths = [] if named else ["tests", "-m", RELEASE_DEPENDENT]
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *paths, *pytest_args]

    def run(release: str) -> tuple:
        started = time.time()
        if jobs == 1:
            print(f"\n===== SGLang {release} =====", flush=True)
            return subprocess.run(cmd, cwd=ROOT, env=environ_for(release)).returncode, time.time() - started, ""
        done = subprocess.run(cmd, cwd=ROOT, env=dict(environ_for(release), OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return done.returncode, time.time() - started, done.stdout

    results = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run, release): release for release in releases}
        for future in as_completed(futures):
            rc, took, output = future.result()
            results[futures[future]] = (rc, took)
            if output:
                print(f"\n===== SGLang {futures[future]} =====\n{output}", flush=True)
    print("\nrelease matrix:")
    for release in releases:
        rc, took = results[release]
        print(f"  {release:<14} {'passed' if rc == 0 else 'FAILED'}  {took:.0f}s")
    failed = sum(rc != 0 for rc, _ in results.values())
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


TABLE_START = "<!-- compat-table:start (generated by: python tools/releases.py table --all) -->"
TABLE_END = "<!-- compat-table:end -->"
BACKENDS_START = "<!-- backend-table:start (generated by: python tools/releases.py table --all) -->"
BACKENDS_END = "<!-- backend-table:end -->"

BACKEND_COLUMNS = {
    "flashinfer": "flashinfer", "triton": "triton", "trtllm_mha": "trtllm_mha", "fa3": "fa3", "fa4": "fa4",
    "aiter": "aiter", "aiter_mla": "aiter (MLA)",
    "torch_native": "any other (torch_native, flex_attention, flashinfer_mla, flashmla, cutlass_mla, trtllm_mla, ...)",
}
"""The backend matrix's columns: ``attention_support`` names and headings (torch_native
stands for every backend the project has not examined)."""

_PROBE = f"""
import contextlib, io, json
from sglang_spec_plugins.testing.cpu import install_stand_ins
install_stand_ins()
from sglang_spec_plugins.cli import main
doctor = io.StringIO()
with contextlib.redirect_stdout(doctor):
    main(["doctor", "--json"])
report = {{"doctor": json.loads(doctor.getvalue())}}
if report["doctor"]["ok"]:
    from sglang_spec_plugins.patches.attention_support import attention_support
    report["backends"] = {{b: [attention_support(b, w, 4, s).verdict for s in ("chain", "tree") for w in (2, 4, 6)]
                          for b in {list(BACKEND_COLUMNS)!r}}}
print(json.dumps(report))
"""
"""``doctor --json`` and, where the loader serves plugin algorithms, ``attention_support`` at ndt 4 for
widths 2, 4, 6 (below, equal to, above ndt) of each shape, from one process on the release."""


@functools.lru_cache(maxsize=None)
def probe_release(release: str) -> dict:
    env = environ_for(release)
    env["SGLANG_SPEC_PLUGINS_CONFIG"] = str(ROOT / "tests" / "examples.toml")
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"probing SGLang {release} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table_row(release: str) -> str:
    """One compatibility row (docs/reference/releases.md), read off ``sglang-spec-plugins doctor --json`` on that release."""
    data = probe_release(release)["doctor"]
    sg = data["sglang"]
    hook = sg["width_hooks"][-1] if sg["width_hooks"] else "none"
    applied = [n for n, p in data["patches"].items() if p["verdict"] in ("would apply", "applied")]
    drafts = [n for n in applied if n.startswith("draft_model.")]  # one per SGLang function: counted, not listed
    applied = ([f"draft_model ({len(drafts)} functions)"] if drafts else []) + [n for n in applied if n not in drafts]
    patches = ", ".join(applied) or ("none needed" if data["patches"] else "-")
    backends = "; ".join(f"{n.split('.', 1)[1]}: {v}" for n, v in data.get("attention_backends", {}).items()) or "-"
    verdict = "supported" if data["ok"] else "not served: " + "; ".join(data["problems"])
    return (f"| {release} | {'yes' if sg['plugin_framework'] else 'no'} | {'yes' if sg['algorithm_registry'] else 'no'} "
            f"| `{hook}` | {', '.join(sg['methods_taken_from_enum']) or '-'} | {patches} | {backends} | {verdict} |")


_LETTER = {"served": "S", "patched": "P", "refused": "R"}


def backend_row(release: str) -> Optional[str]:
    """One backend-matrix row (docs/reference/backend-matrix.md; None where the loader serves no plugin algorithm): per backend,
    chain widths below / equal to / above ndt, then tree likewise."""
    verdicts = probe_release(release).get("backends")
    if verdicts is None:
        return None
    cells = ["".join(_LETTER[v] for v in verdicts[b][:3]) + " / " + "".join(_LETTER[v] for v in verdicts[b][3:])
             for b in BACKEND_COLUMNS]
    return f"| {release} | " + " | ".join(f"`{c}`" for c in cells) + " |"


def _section(text: str, start: str, end: str):
    head, rest = text.split(start)
    current, tail = rest.split(end)
    return head, current, tail


COMPAT_PAGE = ROOT / "docs" / "reference" / "releases.md"
BACKENDS_PAGE = ROOT / "docs" / "reference" / "backend-matrix.md"


def table(releases: List[str], check: bool) -> int:
    rows = [table_row(r) for r in releases]
    backend_rows = [row for row in map(backend_row, releases) if row]
    compat_page, backends_page = COMPAT_PAGE.read_text(), BACKENDS_PAGE.read_text()
    if check:
        _, compat, _ = _section(compat_page, TABLE_START, TABLE_END)
        _, backends, _ = _section(backends_page, BACKENDS_START, BACKENDS_END)
        stale = [(COMPAT_PAGE, row) for row in rows if row not in compat]
        stale += [(BACKENDS_PAGE, row) for row in backend_rows if row not in backends]
        for page, row in stale:
            print(f"{page.relative_to(ROOT)}: row differs from the probe: {row}")
        total = len(rows) + len(backend_rows)
        print(f"{total - len(stale)} passed, {len(stale)} failed")
        return 1 if stale else 0
    header = ("\n| release | plugin framework | algorithm registry | width hook the runners call "
              "| methods taken from the enum | patches the loader applies | FA3 / triton with a plugin width != ndt; trtllm_mha on SM90/SM120 | loader |\n"
              "|---|---|---|---|---|---|---|---|\n")
    head, _, tail = _section(compat_page, TABLE_START, TABLE_END)
    COMPAT_PAGE.write_text(head + TABLE_START + header + "\n".join(rows) + "\n" + TABLE_END + tail)
    backend_header = ("\n| release | " + " | ".join(BACKEND_COLUMNS.values()) + " |\n"
                      "|---|" + "---|" * len(BACKEND_COLUMNS) + "\n")
    head, _, tail = _section(backends_page, BACKENDS_START, BACKENDS_END)
    BACKENDS_PAGE.write_text(head + BACKENDS_START + backend_header + "\n".join(backend_rows) + "\n" + BACKENDS_END + tail)
    print("\n".join(rows + backend_rows))
    return 0


SITES_START = "<!-- dflash-sites:start (generated by: python tools/releases.py sites) -->"
SITES_END = "<!-- dflash-sites:end -->"
SITES_PAGE = ROOT / "docs" / "reference" / "draft-model-sites.md"
DRAFT_MODEL_RELEASES = ALL_RELEASES[ALL_RELEASES.index("0.5.14"):]
"""The releases a draft-model plugin is served on, oldest first: the DFLASH-site table's columns."""


def wheel_sites(release: str) -> list:
    """The DFLASH-only sites of ``release``, read off its published wheel (downloaded once into
    ``.sglang/wheels``; nothing installed, nothing imported)."""
    import tempfile

    from sglang_spec_plugins.engine.dflash_sites import dflash_sites

    wheel_requirements("sglang", release)  # downloads the wheel where it is missing
    pattern = re.compile(rf"^sglang-{re.escape(release)}-.*\.whl$")
    path = next(p for p in WHEELS.iterdir() if pattern.match(p.name))
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            if name.startswith("sglang/srt/") and name.endswith(".py"):
                wheel.extract(name, tmp)
        return list(dflash_sites(Path(tmp, "sglang", "srt")))


def release_ranges(found: List[str]) -> str:
    """``found`` (releases of :data:`DRAFT_MODEL_RELEASES`) as runs: ``0.5.14-0.5.16, 0.5.19``."""
    runs: List[List[str]] = []
    for release in DRAFT_MODEL_RELEASES:
        if release in found:
            if runs and DRAFT_MODEL_RELEASES.index(runs[-1][-1]) == DRAFT_MODEL_RELEASES.index(release) - 1:
                runs[-1].append(release)
            else:
                runs.append([release])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def expand_ranges(text: str) -> List[str]:
    """The releases a :func:`release_ranges` cell names."""
    found: List[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        a, b = DRAFT_MODEL_RELEASES.index(first), DRAFT_MODEL_RELEASES.index(last or first)
        found += DRAFT_MODEL_RELEASES[a:b + 1]
    return found


def sites_table(check: bool) -> int:
    """docs/reference/draft-model-sites.md: every DFLASH-only site of 0.5.14-0.5.23 and what a draft-model plugin gets there."""
    from sglang_spec_plugins.engine.dflash_sites import verdict

    where: dict = {}
    judged_as: dict = {}
    for release in DRAFT_MODEL_RELEASES:
        for site in wheel_sites(release):
            judged = verdict(site)
            key = (*site.key, judged.kind, judged.need, judged.why)
            where.setdefault(key, set()).add(release)
            judged_as[key] = judged
    rows = []
    for key in sorted(where):
        judged = judged_as[key]
        what = {"declared": f"served: `DraftModel.{judged.need}`", "answered": "answered",
                "refused": f"refused with `{judged.need}`"}[judged.kind]
        rows.append(f"| `{key[0]}` | `{key[1]}` | {release_ranges(sorted(where[key]))} | {what} | {judged.why} |")
    page = SITES_PAGE.read_text()
    head, current, tail = _section(page, SITES_START, SITES_END)
    if check:
        stale = [row for row in rows if row not in current]
        for row in stale:
            print(f"{SITES_PAGE.relative_to(ROOT)}: row differs from the wheels: {row}")
        extra = len([line for line in current.splitlines() if line.startswith("| `")]) - len(rows)
        print(f"{len(rows) - len(stale)} passed, {len(stale) + max(extra, 0)} failed")
        return 1 if stale or extra else 0
    header = "\n| file (`sglang/srt/`) | function | releases | a draft-model plugin | why |\n|---|---|---|---|---|\n"
    SITES_PAGE.write_text(head + SITES_START + header + "\n".join(rows) + "\n" + SITES_END + tail)
    print(f"{len(rows)} sites")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["install", "test", "table", "sites"])
    parser.add_argument("--check", action="store_true", help="table, sites: compare the rows in docs/reference instead of writing them")
    parser.add_argument("releases", nargs="*")
    parser.add_argument("--ci", action="store_true", help=f"the CI matrix: {' '.join(CI_RELEASES)}")
    parser.add_argument("--all", action="store_true", help="every supported release 0.5.12-0.5.23")
    parser.add_argument("--jobs", type=int, default=1, help="test: releases run at once (default 1)")
    parser.add_argument("--skip-own", action="store_true",
                        help="test: leave out the environment's own release (tests/run.sh tests it in its main run)")
    argv = sys.argv[1:] if argv is None else argv
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.command == "sites":
        return sites_table(args.check)
    releases = args.releases or (ALL_RELEASES if args.all else CI_RELEASES if args.ci else [])
    if args.command == "table" and not args.releases:
        releases = UNSUPPORTED + releases
    if not releases:
        parser.error("name releases, or pass --ci or --all")
    if args.command == "install":
        for release in releases:
            install(release)
        return 0
    if args.command == "table":
        return table(releases, args.check)
    if args.skip_own:
        releases = [r for r in releases if r != metadata.version("sglang")]
    return test(releases, rest, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
