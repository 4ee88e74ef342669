"""Example SBD-style drafter plugin for sglang-spec-plugins."""
