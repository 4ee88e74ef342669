"""What the case plugins share, installed beside each case's module as the module ``bad_plugin_parts``.

A case's module keeps what its case is about (the faulty hook, worker, factory
or validator) and every name its message shows: the algorithm's name, quoted
(the loader reads a plugin it does not load for it), and the classes a message
names by module (``bad_mod.Stop``). The hookimpls made here are a case
module's once it binds them to their hook's name:
``sgl_spec_algorithms = offers("BAD")``.
"""

from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Worker:
    """The worker of an algorithm that only loads: it builds on nothing, and no case starts it."""


def offers(name, worker_factory=None, **fields):
    """An ``sgl_spec_algorithms`` hookimpl offering the one algorithm ``name``, with AlgorithmSpec's ``fields``;
    its worker factory (default) returns :class:`Worker`."""
    factory = worker_factory or (lambda server_args: Worker)

    @hookimpl
    def sgl_spec_algorithms():
        return [AlgorithmSpec(name=name, worker_factory=factory, **fields)]

    return sgl_spec_algorithms


class Forward:
    """What a worker SGLang starts adds to ``worker_base()``: a forward_batch_generation no case runs."""

    def forward_batch_generation(self, batch, **kwargs):
        raise NotImplementedError


def accept(server_args):
    """A validate_server_args that accepts every server's arguments."""


def on_worker_base(members=Forward):
    """A worker factory: the class ``Worker``, ``members`` (a class) on the running SGLang's ``worker_base()``."""

    def worker_factory(server_args):
        from sglang_spec_plugins.worker import worker_base

        return type("Worker", (members, worker_base()), {})

    return worker_factory


def starts(name, worker_factory=None, validate_server_args=accept):
    """An ``sgl_spec_algorithms`` hookimpl offering ``name``, an algorithm SGLang starts (without overlap):
    a validator, by default :func:`accept`, and a worker factory, by default :func:`on_worker_base`'s."""
    return offers(name, worker_factory or on_worker_base(), validate_server_args=validate_server_args)
