"""One of many drafters: installed as the module ``drafter_<i>_mod``, it offers the algorithm ``D<i>``."""

from sglang_spec_plugins import AlgorithmSpec, hookimpl

NAME = "D" + __name__.split("_")[1]


class Worker:
    pass


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name=NAME, worker_factory=lambda server_args: Worker, supports_overlap=True)]
