raise ImportError("needs flash_attn")
