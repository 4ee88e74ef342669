from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="bad", worker_factory=lambda server_args: Worker, supports_overlap=True)]


@hookimpl
def sgl_spec_draft_may_verify(algorithm):
    return True if algorithm == "bad" else None
