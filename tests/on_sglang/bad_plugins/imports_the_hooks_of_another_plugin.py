from prompt_lookup_drafter.plugin import *  # noqa: F401,F403  the example's hooks: sgl_spec_verify_width among them

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD", supports_overlap=True)
