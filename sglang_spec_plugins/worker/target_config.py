"""What a worker's ``validate_server_args`` may read off the target's checkpoint before any weight loads."""

from __future__ import annotations

from typing import Any, Optional

from ..errors import is_plain_int


def target_vocab_size(server_args: Any) -> Optional[int]:
    """The target's ``vocab_size`` from ``config.json`` in ``server_args.model_path``
    where that is a local folder whose file says it (nothing is downloaded, no
    model is built); None otherwise (the worker's ``model_config.vocab_size``
    then says it, once the model is loaded)."""
    from pathlib import Path

    from ..serving.draft_model_check import read_config

    path = getattr(server_args, "model_path", None)
    if not isinstance(path, str) or not Path(path).is_dir():
        return None
    config, _ = read_config(path)
    vocab = config.get("vocab_size") if isinstance(config, dict) else None
    return vocab if is_plain_int(vocab) and vocab > 0 else None
