"""The GPU benchmark's tables come from its committed results on any machine (no GPU, no timing)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_layer_step_tables_from_committed_results():
    results = sorted(str(p) for p in (ROOT / "benchmarks" / "results").glob("layer_step_h200_0.5.*.json"))
    assert results, "no committed layer-step results"
    for metric in ("step_ms", "graph_ms"):
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_layer_step.py"), "--summarize", *results,
                              "--metric", metric], capture_output=True, text=True, check=True).stdout
        for release in ("0.5.21", "0.5.23"):
            for backend in ("trtllm_mha", "flashinfer"):
                assert f"**SGLang {release}, {backend}** ({metric}" in out
        assert "0 failed" in out and "worst |a÷b - 1|" in out


def test_adaptive_width_dry_run(tmp_path):
    """benchmarks/adaptive_width.py end to end without a GPU (a synthetic step-time model): buckets chosen from
    the grid, the sequence served through the package's WidthSchedule, padded sizes, the report and its table."""
    out = tmp_path / "adaptive.json"
    text = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "adaptive_width.py"), "--dry-run", "--out", str(out),
                           "--steps", "2"], capture_output=True, text=True, check=True).stdout
    import json

    data = json.loads(out.read_text())
    assert data["dry_run"] and set(data["report"]) == {"0.6", "0.7", "0.8", "0.9"}
    assert data["buckets"]["0.6"]["1"] >= data["buckets"]["0.6"]["64"]  # wider verify at small batches
    for report in data["report"].values():
        # the bucket width of the size a batch pads to is the best width at that size
        assert all(r > 0.999 for r in report["per_batch_size_vs_best_width_there"].values())
        assert report["adaptive_vs_static16"] >= 0.999
    assert "acceptance 0.9: adaptive" in text and "vs best width there" in text


def test_adaptive_width_tables_from_committed_result():
    """benchmarks/README.md's widths-by-batch-size tables are what `adaptive_width.py --markdown` prints from
    the committed H200 result, and the result shows the issue's goals: at least 1.3x over static 16 at batch 64
    where some width can give it (acceptance 0.6-0.8), and no batch size more than 2% behind its best width."""
    import json

    result = ROOT / "benchmarks" / "results" / "adaptive_width_h200_0.5.23.json"
    text = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "adaptive_width.py"), "--markdown", str(result)],
                          capture_output=True, text=True, check=True).stdout.strip()
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for table in text.split("\n\n"):
        assert table in readme
    data = json.loads(result.read_text())
    assert not data["dry_run"] and data["device"] == "NVIDIA H200" and data["layers"] == 32
    for acceptance in ("0.6", "0.7", "0.8"):
        assert data["report"][acceptance]["per_batch_size_vs_static16"]["64"] >= 1.3
    for report in data["report"].values():
        assert min(report["per_batch_size_vs_best_width_there"].values()) >= 0.98
    assert all(mb > 0 for mb in data["graph_memory_mb"].values())
