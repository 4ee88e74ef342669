"""One of many drafters: installed as the module ``drafter_<i>_mod``, it offers the algorithm ``D<i>``."""

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("D" + __name__.split("_")[1], supports_overlap=True)
