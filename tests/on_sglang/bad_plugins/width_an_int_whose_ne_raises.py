from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=lambda server_args: Worker)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    return W(4) if algorithm == "BAD" else None


class W(int):
    def __ne__(self, other):
        raise TypeError("no")
