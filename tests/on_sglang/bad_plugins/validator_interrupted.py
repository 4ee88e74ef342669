from bad_plugin_parts import starts


def _validate(args):
    raise KeyboardInterrupt


sgl_spec_algorithms = starts("BAD", validate_server_args=_validate)
