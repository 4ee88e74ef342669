from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="ÄLGO", worker_factory=lambda server_args: Worker, supports_overlap=True)]
