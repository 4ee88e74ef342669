"""Example DFLASH-style block drafter plugin for sglang-spec-plugins."""
