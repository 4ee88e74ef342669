from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD", supports_overlap=True)


class Weird(Exception):
    def __str__(self):
        raise ValueError("bad str")


@hookimpl
def sgl_spec_draft_may_verify(algorithm):
    raise Weird()
