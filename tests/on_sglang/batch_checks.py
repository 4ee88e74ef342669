"""The bad TARGET_VERIFY batches every backend patch must refuse, and how to check it."""

import pytest


def bad_batches(where: str, requests: int) -> dict:
    """TARGET_VERIFY batches every backend patch must refuse, for ``requests``
    requests of the SBD fixture (maximum width 8): {case: (input tokens, error)}."""
    return {
        "non-uniform": (2 * requests + 1, "do not split evenly"),
        "above the maximum": (9 * requests, rf"{where}: width 9 \({9 * requests} tokens / {requests} requests\) "
                                            r"is above the maximum 8 \(algorithm SBD, plugin sbd\)"),
    }


def refused_by_the_patches_only(run, message: str) -> None:
    """``run()`` raises VerifyLayoutError matching ``message`` with the loader's
    patches applied; with them reverted, the release runs it without a word."""
    from sglang_spec_plugins.patches import PATCHES, revert_all
    from sglang_spec_plugins.verify_layout import VerifyLayoutError

    with pytest.raises(VerifyLayoutError, match=message):
        run()
    revert_all(PATCHES)
    run()
