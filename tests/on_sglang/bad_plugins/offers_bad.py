from sglang_spec_plugins import AlgorithmSpec, hookimpl

from bad_plugin_parts import Worker


@hookimpl
def sgl_spec_algorithms():  # a def of its own: a case's entry point names this function
    return [AlgorithmSpec(name="BAD", worker_factory=lambda server_args: Worker, supports_overlap=True)]
