from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    return __import__("numpy").array([4, 4]) if algorithm == "BAD" else None
