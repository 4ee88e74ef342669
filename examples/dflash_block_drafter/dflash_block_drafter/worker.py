"""The block drafter's worker SGLang instantiates (this module imports SGLang);
see ``sbd_drafter.worker``."""

from sglang_spec_plugins.worker import worker_base


class DFlashBlockWorker(worker_base()):
    """Placeholder: a real block drafter proposes a block of ``block_size``
    tokens and verifies it in its own model runner (draft-may-verify).
    ``supports_overlap=True``: a real worker must then take part in overlap
    scheduling (the ``on_publish`` callback the scheduler passes)."""

    def forward_batch_generation(self, batch, **kwargs):
        raise NotImplementedError("dflash_block_drafter is an example of the plugin contract; it carries no model")
