from sglang_spec_plugins import hookimpl

from bad_plugin_parts import starts

sgl_spec_algorithms = starts("BAD")


@hookimpl
def sgl_spec_widths_by_batch_size(algorithm):
    return {1: 4, 16: 2} if algorithm == "BAD" else None
