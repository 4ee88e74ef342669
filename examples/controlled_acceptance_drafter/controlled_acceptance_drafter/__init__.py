"""A drafter whose acceptance is a parameter: the target's own recorded greedy continuation, each token kept with probability ``acceptance``."""
