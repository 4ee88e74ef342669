"""The rooms that know SGLang: probing the installed release and registering
plugin algorithms with it. Only this package and ``patches`` import SGLang,
and only inside functions."""
