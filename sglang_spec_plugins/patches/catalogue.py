"""Every patch the loader applies, in order, and the module defining each.

Importing this imports every patch module; the loader does not, unless the
plans are not kept (:mod:`.plan_cache`) or a target is imported already
(:mod:`.deferred`).
"""

from . import aiter, backend_gate, capture_input, draft_model, fa3, runners, triton, trtllm_mha, verify_batch
from . import widths_by_batch_size

MODULES = (draft_model, runners, capture_input, trtllm_mha, aiter, fa3, triton, backend_gate, verify_batch,
           widths_by_batch_size)
"""The modules defining patches, in the order their patches apply: line edits
first (``draft_model``: they rebuild SGLang's functions from source), then the wrappers."""

PATCHES = tuple(patch for module in MODULES for patch in module.PATCHES)

OWNERS = {patch.name: module.__name__ for module in MODULES for patch in module.PATCHES}
"""Patch name -> the module defining it."""
