from sglang_spec_plugins import AlgorithmSpec, hookimpl


@hookimpl
def sgl_spec_verify_widht(algorithm):
    return 1
