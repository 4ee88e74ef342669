from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Specs(list):
    def __iter__(self):
        raise RuntimeError("no iter")


@hookimpl
def sgl_spec_algorithms():
    return Specs()
