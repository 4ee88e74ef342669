from sglang_spec_plugins import AlgorithmSpec, hookimpl


def sgl_spec_algorithms():
    return []
