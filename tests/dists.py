"""Build tiny installed distributions for tests: a real ``*.dist-info`` with an
``entry_points.txt``, found by ``importlib.metadata`` like any pip install."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, Optional


def make_dist(root: Path, name: str, entry_points: Dict[str, str], modules: Dict[str, str], version: str = "1.0",
              group: str = "sglang_spec_plugins") -> Path:
    """Write modules and a dist-info under ``root`` (put ``root`` on sys.path).

    ``entry_points`` maps plugin names to ``module:attr`` in the entry-point
    ``group``; ``modules`` maps module names to source text.
    """
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{ep} = {target}\n" for ep, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    return root


PLUGIN_HEADER = "from sglang_spec_plugins import AlgorithmSpec, hookimpl\n"


def simple_plugin(algorithm: str, width: Optional[str] = None, draft: Optional[str] = None, max_width: Optional[str] = None,
                  widths: Optional[str] = None) -> str:
    """Source of a module-style plugin offering ``algorithm``; each given hook
    body is an expression (``width`` may use ``num_draft_tokens`` and
    ``settings``), a hook not given is not implemented."""
    hooks = {
        "sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings)": width,
        "sgl_spec_draft_may_verify(algorithm, settings)": draft,
        "sgl_spec_max_verify_width(algorithm, num_draft_tokens, settings)": max_width,
        "sgl_spec_widths_by_batch_size(algorithm, num_draft_tokens, is_draft_worker, settings)": widths,
    }
    source = PLUGIN_HEADER + textwrap.dedent(f"""
        class Worker:
            pass

        @hookimpl
        def sgl_spec_algorithms():
            return [AlgorithmSpec(name={algorithm!r}, worker_factory=lambda server_args: Worker)]
        """)
    for signature, body in hooks.items():
        if body is not None:
            source += f"\n@hookimpl\ndef {signature}:\n    return ({body}) if algorithm == {algorithm.upper()!r} else None\n"
    return source
