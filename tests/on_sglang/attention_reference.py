"""The attention reference now lives in
:mod:`sglang_spec_plugins.testing.attention_reference`; this name stays for
the harnesses that import ``attention_reference`` from tests/on_sglang."""

from sglang_spec_plugins.testing.attention_reference import attend  # noqa: F401
