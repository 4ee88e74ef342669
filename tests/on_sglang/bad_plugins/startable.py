from sglang_spec_plugins import AlgorithmSpec, hookimpl


def _validate(args):
    pass


def _factory(server_args):
    from sglang_spec_plugins.worker import worker_base

    class Worker(worker_base()):
        def forward_batch_generation(self, batch, **kwargs):
            raise NotImplementedError

    return Worker


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=_factory, validate_server_args=_validate)]
