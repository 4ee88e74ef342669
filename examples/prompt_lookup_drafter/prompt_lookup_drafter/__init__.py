"""A model-free prompt-lookup chain drafter for SGLang, as a sglang-spec-plugins plugin."""
