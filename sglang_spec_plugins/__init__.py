"""sglang-spec-plugins: a stable plugin contract for speculative-decoding
drafters in SGLang.

Drafter authors need only :data:`hookimpl` and :class:`AlgorithmSpec` (and
:class:`DraftModel` for a worker with its own draft model), and
:func:`is_plain_int`, the rule the framework judges widths and sizes by, for
their own settings; see
:mod:`sglang_spec_plugins.hookspecs` for the contract. Importing this package
does not import SGLang.
"""

__version__ = "0.1.0"

from .errors import is_plain_int  # noqa: E402
from .hookspecs import AlgorithmSpec, hookimpl  # noqa: E402

__all__ = ["AlgorithmSpec", "DraftModel", "hookimpl", "is_plain_int", "__version__"]


def __getattr__(name: str):
    if name == "DraftModel":  # imported by a plugin that declares a draft model, not by every process at load
        from .draft_model import DraftModel

        return DraftModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
