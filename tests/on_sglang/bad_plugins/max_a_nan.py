from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=lambda server_args: Worker)]


@hookimpl
def sgl_spec_max_verify_width(algorithm, num_draft_tokens, settings):
    return float("nan") if algorithm == "BAD" else None
