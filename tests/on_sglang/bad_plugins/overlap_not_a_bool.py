from sglang_spec_plugins import AlgorithmSpec, hookimpl


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec("X", lambda a: object, supports_overlap="yes")]
