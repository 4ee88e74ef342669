from bad_plugin_parts import starts


def _factory(server_args):
    return __import__("flash_attn_not_installed")


sgl_spec_algorithms = starts("BAD", worker_factory=_factory)
