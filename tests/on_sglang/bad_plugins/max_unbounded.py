from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


@hookimpl
def sgl_spec_max_verify_width(algorithm, num_draft_tokens, settings):
    return 10**6 if algorithm == "BAD" else None
