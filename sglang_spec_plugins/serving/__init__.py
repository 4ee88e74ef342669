"""What wires a server together, above both ``engine`` and ``patches``:
registering plugin algorithms with SGLang's registry, the start-up check
SGLang calls while it resolves its server arguments, and ``check``'s
prediction of what the installed release will do. Imports SGLang only inside
functions."""
