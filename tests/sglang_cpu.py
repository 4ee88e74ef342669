"""The CPU harness stand-ins now live in :mod:`sglang_spec_plugins.testing.cpu`
(the conformance kit uses them too); this name stays for scripts that still
import ``sglang_cpu`` from tests/."""

from sglang_spec_plugins.testing.cpu import (  # noqa: F401
    absent_kernel_package,
    install_stand_ins,
    reset_plugin_state,
    run_sglang_plugin_loading,
)
