from bad_plugin_parts import starts


def _factory(server_args):
    return object()


sgl_spec_algorithms = starts("BAD", worker_factory=_factory)
