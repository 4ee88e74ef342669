"""SGLang's Python source on a machine whose torch has no GPU (the CPU harness).

SGLang imports torchvision (its multimodal configs), and torchvision from the
package index is a CUDA build: on a CPU-only torch its import fails with
"operator torchvision::nms does not exist". Defining the two operators it
registers at import lets the real Python part of torchvision, and so SGLang,
import. Nothing else is stood in for: no kernel runs on this path.

The quickstart's venv (CPU torch, SGLang installed ``--no-deps``) is such a
machine; the demo, the conformance kit and the CLI's ``check``/``doctor`` call
:func:`prepare` so that they read the real SGLang there, and say so.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

STAND_INS = ("torchvision::nms", "torchvision::qnms")
"""The operators defined on a CPU-only torch (nothing else)."""


def install_stand_ins() -> None:
    """Define :data:`STAND_INS` (idempotent). Must run before SGLang is imported."""
    import torch

    for op in STAND_INS:
        try:
            torch.library.define(op, "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass  # already defined in this process


def cpu_only_torch() -> Optional[str]:
    """The installed torch's version when it is a CPU-only build (neither CUDA
    nor ROCm), else None (a GPU build, or no torch)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return torch.__version__
    return None


def prepare() -> Optional[str]:
    """Where SGLang is installed beside a CPU-only torch, install the stand-ins
    and return a sentence saying so (for output meant for people); elsewhere do
    nothing and return None. Imports torch only where SGLang is installed."""
    if importlib.util.find_spec("sglang") is None:
        return None
    version = cpu_only_torch()
    if version is None:
        return None
    install_stand_ins()
    return (f"CPU harness: torch {version} has no GPU, so SGLang was imported with stand-ins for "
            f"{' and '.join(STAND_INS)} (torchvision's CUDA build cannot load on it); the verdicts below are read "
            "off the real SGLang source, no kernel ran")
