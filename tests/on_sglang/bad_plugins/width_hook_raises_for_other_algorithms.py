from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=lambda server_args: Worker, supports_overlap=True)]


@hookimpl
def sgl_spec_verify_width(algorithm):
    return {"BAD": 4}[algorithm]
