from bad_plugin_parts import Forward, on_worker_base, starts


class Members(Forward):
    init_cuda_graphs = None


sgl_spec_algorithms = starts("BAD", worker_factory=on_worker_base(Members))
