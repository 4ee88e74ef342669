"""The SBD worker SGLang instantiates (this module imports SGLang).

Built on :func:`sglang_spec_plugins.worker.worker_base`, SGLang's
own spec-worker base with a constructor that fits every release 0.5.12-0.5.23.
"""

from sglang_spec_plugins.worker import worker_base


class SBDWorker(worker_base()):
    """Placeholder: a real SBD worker drafts 1..k tokens, runs the target's
    TARGET_VERIFY forward at the plugin's width and commits the accepted ones."""

    def forward_batch_generation(self, batch, **kwargs):
        raise NotImplementedError("sbd_drafter is an example of the plugin contract; it carries no SBD model")
