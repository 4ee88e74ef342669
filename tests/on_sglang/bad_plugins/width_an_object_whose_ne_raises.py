from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    return W() if algorithm == "BAD" else None


class W:
    def __ne__(self, other):
        raise TypeError("no")

    __eq__ = __ne__

    def __repr__(self):
        return "<W>"
