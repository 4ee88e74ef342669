"""The trtllm_mha CPU harness now lives in :mod:`sglang_spec_plugins.testing.trtllm`
(the conformance kit uses it too); ``import trtllm_harness`` still gives that
module, for the modules that have not switched."""

import sys

from sglang_spec_plugins.testing import trtllm

sys.modules[__name__] = trtllm
