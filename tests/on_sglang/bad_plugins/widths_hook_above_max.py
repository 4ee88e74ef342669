from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


@hookimpl
def sgl_spec_widths_by_batch_size(algorithm, num_draft_tokens, is_draft_worker, settings):
    return {1: 16, 8: 4} if algorithm == "BAD" else None
