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
