"""DFLASH_BLOCK: a DFLASH-style block drafter with its own DFlash draft model, for sglang-spec-plugins."""
