import collections.abc

from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=lambda server_args: Worker)]


@hookimpl
def sgl_spec_widths_by_batch_size(algorithm, num_draft_tokens, is_draft_worker, settings):
    return Widths() if algorithm == "BAD" else None


class Widths(collections.abc.Mapping):
    def __getitem__(self, key):
        return 2

    def __len__(self):
        return 1

    def __iter__(self):
        raise RuntimeError("no iter")
