"""FAULTY_LOOKUP: PROMPT_LOOKUP whose hooks fault at random, for the GPU soak (``tools/gpu/soak.py --faults``)."""
