from bad_plugin_parts import offers

sgl_spec_algorithms = offers("OTHER", supports_overlap=True)
