import collections.abc

from sglang_spec_plugins import hookimpl

from bad_plugin_parts import offers

sgl_spec_algorithms = offers("BAD")


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
