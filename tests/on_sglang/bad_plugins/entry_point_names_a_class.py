from sglang_spec_plugins import AlgorithmSpec, hookimpl


class Hooks:
    @hookimpl
    def sgl_spec_algorithms(self):
        return [AlgorithmSpec("BAD", lambda a: object)]
