from sglang_spec_plugins import AlgorithmSpec, hookimpl


def _validate(args):
    pass


def _factory(server_args):
    return __import__("flash_attn_not_installed")


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=_factory, validate_server_args=_validate)]
