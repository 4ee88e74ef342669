from bad_plugin_parts import offers

sgl_spec_algorithms = offers("SBD2", supports_overlap=True)
