from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    return fail() if algorithm == "BAD" else None


class Weird(Exception):
    def __str__(self):
        raise ValueError("bad str")


def fail():
    raise Weird()
