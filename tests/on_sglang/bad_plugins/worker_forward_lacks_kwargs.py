from bad_plugin_parts import on_worker_base, starts


class Members:
    def forward_batch_generation(self, batch):
        raise NotImplementedError


sgl_spec_algorithms = starts("BAD", worker_factory=on_worker_base(Members))
