from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD", supports_overlap=True)


@hookimpl
def sgl_spec_draft_may_verify(algorithm):
    raise RuntimeError("x")
