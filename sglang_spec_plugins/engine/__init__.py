"""The rooms that read SGLang: what the installed release offers (the probe,
its sources, the worker contract, facts about a running server) and the
objects SGLang is handed (the algorithm object, the worker bases). Nothing
here edits SGLang (that is ``patches``); SGLang is imported only inside
functions."""
