"""An SBD-style self-speculative drafter for SGLang: the target predicts a masked block, no draft model."""
