from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="Bad", worker_factory=lambda server_args: Worker, supports_overlap=True)]


@hookimpl
def sgl_spec_verify_width(algorithm):
    return 2 if algorithm == "Bad" else None
