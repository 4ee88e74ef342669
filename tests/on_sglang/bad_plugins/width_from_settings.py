from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=lambda server_args: Worker)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    return settings.get("verify_width", num_draft_tokens) if algorithm == "BAD" else None
