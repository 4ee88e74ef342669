from bad_plugin_parts import offers

sgl_spec_algorithms = offers("eagle3", supports_overlap=True)
