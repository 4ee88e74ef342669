from bad_plugin_parts import starts

sgl_spec_algorithms = starts("BAD")
