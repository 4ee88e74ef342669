from bad_plugin_parts import offers

sgl_spec_algorithms = offers("ÄLGO", supports_overlap=True)
