raise ImportError("imported although the config is broken")
