"""Write the continuations record from a plain greedy run's outputs (no SGLang).

    python -m controlled_acceptance_drafter.record OUT.json < RUN.jsonl

``RUN.jsonl`` has one JSON object per request, ``{"input_ids": [...], "output_ids": [...]}``;
:func:`record` is the same from Python.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

from .draws import prompt_key


def record(runs: Iterable[Tuple[Sequence[int], Sequence[int]]]) -> Dict[str, List[int]]:
    """``{prompt_key(prompt): output}`` for each ``(prompt, output)``; a prompt given twice must give the same output."""
    out: Dict[str, List[int]] = {}
    for prompt, output in runs:
        key = prompt_key(prompt)
        if key in out and out[key] != list(output):
            raise ValueError(f"prompt {key} has two different greedy outputs: not a record of one plain engine")
        out[key] = list(output)
    return out


if __name__ == "__main__":
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    Path(sys.argv[1]).write_text(json.dumps(record((r["input_ids"], r["output_ids"]) for r in rows)))
