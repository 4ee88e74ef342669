from bad_plugin_parts import starts


def _validate(args):
    assert args.speculative_num_draft_tokens == 16, "blocks of 16 only"


sgl_spec_algorithms = starts("BAD", validate_server_args=_validate)
