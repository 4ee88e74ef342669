"""tools/gpu/engine/run.sh and site.sh without a GPU: the release choice (SGLANG_RELEASE) picks the same folder in
both, and run.sh's triton_widths and real phases, run with engine_check.py stood in for (it records its command
line and configuration instead of starting SGLang), start the engines they say: on triton, each speculative engine
beside the plain one compare.py compares it with, each plugins.toml one the package accepts at its ndt; on the
trained model, every drafter of issue 46 in the mode and at the width it says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "tools" / "gpu" / "engine"
sys.path.insert(0, str(ENGINE))

import compare  # noqa: E402
import engine_check  # noqa: E402

FAKE_ENGINE = """import json, os, sys
label = sys.argv[2]
with open(os.path.join(os.environ["OUT"], "engines.jsonl"), "a") as f:
    f.write(json.dumps({"label": label, "argv": sys.argv[2:], "ok": True,
                        "plugins_config": os.environ.get("SGLANG_SPEC_PLUGINS_CONFIG"),
                        "sglang_plugins": os.environ.get("SGLANG_PLUGINS"),
                        "triton_f32": os.environ.get("TRITON_F32_DEFAULT")}) + "\\n")
"""


def _folders(script: Path) -> dict:
    """The release -> folder cases of a script (``0.5.16) E=...; ...;;``)."""
    return {release: folder.replace("$PWD/", "") for release, folder in
            re.findall(r"(0\.5\.\d+)\) E=(\S+?)\s*;", script.read_text())}


def test_site_and_run_read_each_release_from_the_same_folder():
    assert _folders(ENGINE / "site.sh") == _folders(ENGINE / "run.sh") == {"0.5.16": ".e2e", "0.5.17": ".e2e17"}
    assert "/.e2e*/" in (ROOT / ".gitignore").read_text().split()


@pytest.mark.parametrize("script", ["site.sh", "run.sh"])
def test_a_release_neither_script_knows_stops_at_once(tmp_path, script):
    done = subprocess.run(["bash", str(ENGINE / script)], env=dict(os.environ, SGLANG_RELEASE="0.5.18", OUT=str(tmp_path)),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "SGLANG_RELEASE=0.5.18" in done.stderr
    assert not (ROOT / ".e2e18").exists() and list(tmp_path.iterdir()) == []


def _run_phase(tmp_path, release, phase="triton_widths", **env):
    """run.sh PHASE with nvidia-smi and python3 stood in for; its timeline and the engines' records."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    (tmp_path / "fake_engine.py").write_text(FAKE_ENGINE)
    (bin_dir / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'fake_engine.py'} \"$@\"\n")
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    done = subprocess.run(["bash", str(ENGINE / "run.sh"), phase], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(out), NO_ARCHIVE="1",
                                   ENGINE_LOGS=str(tmp_path / "logs"), SGLANG_RELEASE=release,
                                   COMPILE_WAIT="0", **env))  # a compiler this machine runs is no warm engine's
    assert done.returncode == 0, done.stderr
    lines = (out / "engines.jsonl").read_text().splitlines() if (out / "engines.jsonl").exists() else []
    return (out / "timeline.txt").read_text(), [json.loads(line) for line in lines]


def _starts_in_groups(timeline: str) -> list:
    """The engines' labels in the groups that run at once (a group ends where the next one's engines start)."""
    groups, running = [], set()
    for line in timeline.splitlines():
        if m := re.search(r"START (\S+)", line):
            if not running:
                groups.append([])
            groups[-1].append(m.group(1))
            running.add(m.group(1))
        elif m := re.search(r"END (\S+)", line):
            running.discard(m.group(1))
    return groups


def test_triton_widths_serves_every_width_engine_beside_its_plain_engine(tmp_path):
    timeline, records = _run_phase(tmp_path, "0.5.17")
    engines = {r["label"]: (engine_check.arguments().parse_args(r["argv"]), r) for r in records}
    assert set(engines) == {f"{p}_{what}_{cg}" for cg in ("cg", "nocg") for p, what in
                            (("trs", "base"), ("trs", "sbd"), ("trw", "base"), ("trw", "pl_widths"), ("trw", "pl_below"))}
    assert [len(group) for group in _starts_in_groups(timeline)] == [4, 4, 2]  # at most four engines at once
    assert sorted(log.stem for log in (tmp_path / "logs").iterdir()) == sorted(engines)  # ENGINE_LOGS: one log each
    configs = {}
    for label, (args, record) in engines.items():
        assert args.backend == "triton" and args.dtype == "float16" and record["triton_f32"] is None
        assert args.cuda_graph == label.endswith("_cg")
        base = compare.baseline_of(label)
        if base is None:
            assert args.spec is None and record["plugins_config"] is None
            continue
        plain, _ = engines[base]  # compare.py's plain engine: same model, prompts, lengths, batches, graphs
        assert (plain.model, plain.staggered, plain.batches, plain.new_tokens, plain.cuda_graph, plain.dtype) == \
            (args.model, args.staggered, args.batches, args.new_tokens, args.cuda_graph, args.dtype)
        configs[label] = (args.spec, args.ndt, Path(record["plugins_config"]).name)
    assert configs == {**{f"trs_sbd_{cg}": ("SBD", 8, "plugins_sbd.toml") for cg in ("cg", "nocg")},
                       **{f"trw_pl_widths_{cg}": ("PROMPT_LOOKUP", 4, "plugins_widths.toml") for cg in ("cg", "nocg")},
                       **{f"trw_pl_below_{cg}": ("PROMPT_LOOKUP", 4, "plugins_below.toml") for cg in ("cg", "nocg")}}
    assert engines["trs_base_cg"][0].model == "/tmp/tiny-favoured" and engines["trw_base_cg"][0].staggered


def test_triton_widths_in_float32_sets_ieee_dots(tmp_path):
    _, records = _run_phase(tmp_path, "0.5.17", TW_DTYPE="float32")
    assert len(records) == 10 and all(r["triton_f32"] == "ieee" and "float32" in r["argv"] for r in records)


def test_triton_widths_is_skipped_on_0_5_16(tmp_path):
    timeline, records = _run_phase(tmp_path, "0.5.16")
    assert records == [] and "SKIP triton_widths" in timeline


@pytest.mark.sglang  # the plugins.toml files enable the example drafters, installed with SGLang's environment
def test_each_triton_widths_config_verifies_below_ndt():
    from sglang_spec_plugins.plugins import discover_configured
    from sglang_spec_plugins.policy import build_policies

    for name, algorithm, ndt, widths in (("plugins_sbd.toml", "SBD", 8, (2, 4, 8)),
                                          ("plugins_widths.toml", "PROMPT_LOOKUP", 4, (2, 4)),
                                          ("plugins_below.toml", "PROMPT_LOOKUP", 4, (2,))):
        _, policies = build_policies(discover_configured(ENGINE / name), tolerate=False)
        policy = policies[algorithm]
        policy.validate(ndt)
        assert policy.candidate_widths(ndt, False) == widths, name


def test_triton_margins_asks_about_prompt_lookup_s_triton_divergences(tmp_path):
    """run.sh triton_margins (0.5.17) runs margins.py once, on the committed triton divergences, for the
    PROMPT_LOOKUP engines (trw_) in their dtype; those divergences are compare.py's reading of the committed
    triton results, each against its own plain engine on triton in float16."""
    timeline, records = _run_phase(tmp_path, "0.5.17", phase="triton_margins")
    assert "margins trw rc=0" in timeline and len(records) == 1
    path, *flags = records[0]["argv"]
    assert Path(path).resolve() == ENGINE.parent / "results" / "triton_0.5.17" / "divergences.json"
    assert flags == ["triton", "--prefix", "trw_", "--dtype", "float16"]
    committed = json.loads(Path(path).read_text())
    records_of_run = compare.load(ENGINE.parent / "results" / "triton_0.5.17")
    assert committed == compare.divergences(records_of_run)
    asked = [d for d in committed if d["label"].startswith("trw_")]
    assert len(asked) == 40 and {d["baseline"] for d in asked} == {"trw_base_cg", "trw_base_nocg"}
    plain = records_of_run["trw_base_cg"]  # no model named: $ENGINE_MODEL, which margins.py is run under too
    assert (plain["backend"], plain["dtype"], plain["model"]) == ("triton", "float16", None)


def test_triton_margins_is_skipped_on_0_5_16(tmp_path):
    timeline, records = _run_phase(tmp_path, "0.5.16", phase="triton_margins")
    assert records == [] and "SKIP triton_margins" in timeline


REAL = {"base": (None, None), "sync": (None, None), "ngram": ("NGRAM", None), "pl_w2": ("PROMPT_LOOKUP", "plugins_real_pl_w2.toml"),
        "pl_w4": ("PROMPT_LOOKUP", "plugins_real_pl_w4.toml"), "pl_w8": ("PROMPT_LOOKUP", "plugins_at.toml"),
        "pl_batch": ("PROMPT_LOOKUP", "plugins_real_pl_batch.toml"), "pl_acc": ("PROMPT_LOOKUP", "plugins_real_pl_acc.toml"),
        "native": ("DFLASH", None), "block": ("DFLASH_BLOCK", "plugins_draft.toml"),
        "part_w4": ("DFLASH_BLOCK", "plugins_draft_w4.toml"), "part_w8": ("DFLASH_BLOCK", "plugins_draft_w8.toml")}
"""run.sh real's engines: the algorithm and plugins.toml of each (SGLang's own engines load no plugin)."""


def _trained(tmp_path) -> Path:
    target = tmp_path / "real-target"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"")
    (target / "prompts.json").write_text(json.dumps({"kinds": {"completion": [[5, 6]], "edit": [[7, 8]]}}))
    return target


@pytest.mark.parametrize("mode", ["greedy", "overlap", "sampled"])
def test_real_serves_every_drafter_on_the_trained_model_one_at_a_time(tmp_path, mode):
    env = {"greedy": {}, "overlap": {"REAL_OVERLAP": "1"}, "sampled": {"REAL_SAMPLED": "1"}}[mode]
    prefix = {"greedy": "rl", "overlap": "rlo", "sampled": "rs"}[mode]
    target = _trained(tmp_path)
    timeline, records = _run_phase(tmp_path, "0.5.16", phase="real", REAL_TARGET=str(target),
                                   REAL_DRAFT=str(tmp_path / "draft"), **env)
    assert [r["label"] for r in records] == [f"{prefix}_{name}_cg" for name in REAL]  # in REAL's order
    assert all(len(group) == 1 for group in _starts_in_groups(timeline))  # one engine at a time
    for record in records:
        name = record["label"][len(prefix) + 1:-3]
        args = engine_check.arguments().parse_args(record["argv"])
        spec, config = REAL[name]
        assert (args.spec, Path(record["plugins_config"]).name if record["plugins_config"] else None) == (spec, config)
        assert compare.baseline_of(record["label"]) == (None if name == "base" else f"{prefix}_base_cg")
        assert (args.backend, args.cuda_graph, args.model, args.prompts, args.batches, args.max_running) == \
            ("flashinfer", True, str(target), str(target / "prompts.json"), [1, 8, 32, 64], 64)
        assert args.timing and args.rounds == 3 and args.new_tokens == 128 and args.min_requests == 4
        assert args.sampling == ("sampled" if mode == "sampled" else "greedy")
        plugin = config is not None
        assert record["sglang_plugins"] == (None if plugin else "none-selected")  # SGLang's own: no plugin loaded
        assert args.overlap == ("off" if name == "sync" or (plugin and mode != "overlap") else "on"), name
        if spec in ("DFLASH", "DFLASH_BLOCK"):
            assert (args.ndt, args.draft) == (16, str(tmp_path / "draft"))
        elif spec:
            assert args.ndt == 8


def test_real_runs_the_engines_named_and_nothing_without_a_trained_model(tmp_path):
    target = _trained(tmp_path)
    _, records = _run_phase(tmp_path, "0.5.16", phase="real", REAL_TARGET=str(target), REAL_ENGINES="native block")
    assert [r["label"] for r in records] == ["rl_native_cg", "rl_block_cg"]
    (target / "model.safetensors").unlink()
    (tmp_path / "again").mkdir()
    timeline, records = _run_phase(tmp_path / "again", "0.5.16", phase="real", REAL_TARGET=str(target))
    assert records == [] and "SKIP real: no trained target" in timeline


@pytest.mark.sglang  # the plugins.toml files enable the example drafters
def test_each_real_config_is_what_its_engine_claims():
    from sglang_spec_plugins.plugins import discover_configured
    from sglang_spec_plugins.policy import build_policies

    for name, algorithm, ndt, widths in (("plugins_real_pl_w2.toml", "PROMPT_LOOKUP", 8, (2,)),
                                          ("plugins_real_pl_w4.toml", "PROMPT_LOOKUP", 8, (4,)),
                                          ("plugins_at.toml", "PROMPT_LOOKUP", 8, (8,)),
                                          ("plugins_real_pl_batch.toml", "PROMPT_LOOKUP", 8, (2, 4, 8)),
                                          ("plugins_real_pl_acc.toml", "PROMPT_LOOKUP", 8, (1, 2, 4, 8))):
        _, policies = build_policies(discover_configured(ENGINE / name), tolerate=False)
        policy = policies[algorithm]
        policy.validate(ndt)
        assert policy.candidate_widths(ndt, False) == widths, name


def test_train_trains_the_gpu_preset_while_warming_flashinfer(tmp_path):
    """train.py (stood in for as the engines are: its record is the line labelled with its first flag) with the
    gpu preset into the folders real serves, the committed record to compare with where there is one; two
    untimed engines beside it on a machine that has not trained, none on one that has."""
    target = tmp_path / "real-target"
    _, records = _run_phase(tmp_path, "0.5.16", phase="train", REAL_TARGET=str(target), REAL_DRAFT=str(tmp_path / "d"))
    trained = next(r for r in records if r["label"] == "--preset")
    assert trained["argv"][:7] == ["--preset", "gpu", "--target", str(target), "--draft", str(tmp_path / "d"), "--out"]
    committed = ENGINE.parent / "results" / "real" / "train.json"
    assert ("--expect" in trained["argv"]) == committed.is_file() and "--force" not in trained["argv"]
    assert sorted(r["label"] for r in records if r["label"].startswith("warm_")) == ["warm_dflash", "warm_plain"]
    plain = engine_check.arguments().parse_args(next(r for r in records if r["label"] == "warm_plain")["argv"])
    assert plain.sampling == "sampled" and not plain.cuda_graph  # its sampled request, the sampling kernels' JIT, at once
    target.mkdir()
    (target / "train.json").write_text("{}")
    (tmp_path / "again").mkdir()
    _, records = _run_phase(tmp_path / "again", "0.5.16", phase="train", REAL_TARGET=str(target), TRAIN_FORCE="1")
    assert [r["label"] for r in records] == ["--preset"] and "--force" in records[0]["argv"]


class _Flushed:
    def __init__(self, success):
        self.success = success


class _Engine:
    """An engine's calls, in order: ``flush`` refused ``busy`` times (the scheduler finishing the batch before)."""

    def __init__(self, busy=0):
        self.calls, self.busy = [], busy

    def flush_cache(self):
        self.calls.append("flush")
        self.busy -= 1
        return _Flushed(self.busy < 0)

    def generate(self, input_ids, sampling_params):
        self.calls.append("generate")
        return [{"output_ids": [1]} for _ in input_ids]


def test_every_cell_starts_from_empty_caches():
    """NGRAM's corpus keeps every request an engine served until flush_cache: each cell (the untimed pass, each
    timed round) flushes first, asking again while the scheduler still finishes, so that no cell is drafted from
    its own earlier outputs."""
    engine = _Engine(busy=2)
    outputs, _ = engine_check.generate_cell(engine, [[[1, 2]], [[3, 4]]], lambda bs: {})
    assert len(outputs) == 2 and engine.calls == ["flush", "flush", "flush", "generate", "generate"]
    engine = _Engine(busy=10 ** 6)
    with pytest.raises(RuntimeError, match="flush_cache still refused"):
        engine_check.flush_caches(engine, seconds=0.2)


@pytest.mark.parametrize("greedy", [False, True])
def test_profile_traces_the_block_drafter_and_native_dflash_under_overlap(tmp_path, greedy):
    target = _trained(tmp_path)
    env = {"PROFILE_GREEDY": "1"} if greedy else {}
    timeline, records = _run_phase(tmp_path, "0.5.16", phase="profile", REAL_TARGET=str(target),
                                   REAL_DRAFT=str(tmp_path / "draft"), PROFILE_BATCHES="1,16", **env)
    prefix = "plo" if greedy else "pso"
    assert [r["label"] for r in records] == [f"{prefix}_block_cg", f"{prefix}_native_cg"]
    assert all(len(group) == 1 for group in _starts_in_groups(timeline))  # one engine at a time
    for record in records:
        args = engine_check.arguments().parse_args(record["argv"])
        assert (args.profile, args.profile_steps, args.overlap, args.timing) == ([1, 16], 16, "on", False)
        assert args.sampling == ("greedy" if greedy else "sampled") and args.draft == str(tmp_path / "draft")
        assert args.spec == {"block": "DFLASH_BLOCK", "native": "DFLASH"}[record["label"].split("_")[1]]


def _profiled():
    """A trace of torch's profiler with Python stacks over a stand-in event loop: three steps, each a worker's
    ``forward_batch_generation`` calling a target's ``forward_batch_generation`` and ``worker.verify``."""
    torch = pytest.importorskip("torch")  # the SGLang-free Python matrix has no torch
    from torch.profiler import ProfilerActivity, profile

    class Target:
        def forward_batch_generation(self, x):
            return torch.relu(x)

    class Worker:
        def verify(self, x):
            return x.sum()

        def forward_batch_generation(self, x):
            return self.verify(Target().forward_batch_generation(x))

    def event_loop_overlap():
        for _ in range(4):
            worker.forward_batch_generation(torch.ones(8))

    worker = Worker()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as traced:
        event_loop_overlap()
    return traced


def test_trace_steps_counts_the_outer_worker_steps_and_puts_each_call_under_its_caller(tmp_path):
    import trace_steps

    _profiled().export_chrome_trace(str(tmp_path / "trace.json"))
    found = trace_steps.summary(trace_steps.read(tmp_path / "trace.json"))
    assert found["steps"] == 2  # four calls, the first dropped; the window runs from the second's start to the fourth's
    assert found["root"] == "test_gpu_engine_scripts.py:event_loop_overlap"
    step = ("test_gpu_engine_scripts.py:forward_batch_generation",)
    assert step in found["tree"] and step + ("test_gpu_engine_scripts.py:verify",) in found["tree"]
    assert step + ("test_gpu_engine_scripts.py:forward_batch_generation",) in found["tree"]  # the target's, inside
    inner = [p for p in found["tree"] if len(p) == 2]
    assert sum(found["tree"][p] for p in inner) <= found["tree"][step] + 1e-9  # a caller's time holds its callees'
    lines = trace_steps.render(found["tree"], depth=2, min_ms=0.0)
    assert lines[0].endswith("forward_batch_generation") and all(l.startswith("  ") for l in lines[1:])
    assert not any("0x" in name for path in found["tree"] for name in path)  # built-ins named alike at every call


def test_trace_steps_reads_py_spy_samples_under_the_scheduler_loop_a_function_s_lines_merged(tmp_path):
    import trace_steps

    loop = "process 7:\"python3 -m sglang\";Thread.run (threading.py:982);Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1130)"
    (tmp_path / "x.raw").write_text("\n".join([
        f"{loop};Scheduler.run_batch (sglang/srt/managers/scheduler.py:2100);W.forward_batch_generation (block_step.py:176) 30",
        f"{loop};Scheduler.run_batch (sglang/srt/managers/scheduler.py:2104);W.forward_batch_generation (block_step.py:180) 10",
        f"{loop};Scheduler.recv_requests (sglang/srt/managers/scheduler.py:900) 40",
        "process 7:\"python3 -m sglang\";main (engine_check.py:10) 500"]) + "\n")  # outside the loop: left out
    tree = trace_steps.spy_tree(tmp_path / "x.raw", rate=200)
    assert tree == {("scheduler.py:run_batch",): 0.2, ("scheduler.py:run_batch", "block_step.py:forward_batch_generation"): 0.2,
                    ("scheduler.py:recv_requests",): 0.2}


def test_wait_for_trace_takes_the_newest_trace_once_written_and_none_without_one(tmp_path):
    import trace_steps

    assert trace_steps.wait_for_trace(tmp_path, seconds=1.5) is None
    (tmp_path / "1.trace.json.gz").write_bytes(b"old")
    (tmp_path / "2.trace.json.gz").write_bytes(b"newest")
    assert trace_steps.wait_for_trace(tmp_path, seconds=5) == tmp_path / "2.trace.json.gz"
