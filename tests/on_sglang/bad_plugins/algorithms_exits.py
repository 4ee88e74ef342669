from sglang_spec_plugins import AlgorithmSpec, hookimpl
import sys


@hookimpl
def sgl_spec_algorithms():
    sys.exit(2)
