from bad_plugin_parts import offers

sgl_spec_algorithms = offers("my-algo", supports_overlap=True)
