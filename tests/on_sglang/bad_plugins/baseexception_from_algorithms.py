from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Stop(BaseException):
    pass


@hookimpl
def sgl_spec_algorithms():
    raise Stop("no")
