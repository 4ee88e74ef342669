from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


@hookimpl
def sgl_spec_widths_by_batch_size(algorithm, num_draft_tokens, is_draft_worker, settings):
    if algorithm != "BAD":
        return None
    return {1: __import__("itertools").count(1).__next__() + __import__("random").randrange(10**5)}
