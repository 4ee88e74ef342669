"""Fault injection: whichever patch target fails to install, every function is
the original afterwards and the error reaches the caller."""

import pytest

from patch_state import assert_untouched, importable_targets
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.patches import PATCHES, apply_all, revert_all


class Injected(RuntimeError):
    pass


def installs(monkeypatch, fail_at=None):
    """Count target installs through ``MethodPatch.apply``; raise at the ``fail_at``-th."""
    count = []
    real = {cls: getattr(cls, "replacement") for cls in {type(p) for p in PATCHES}}

    def counting(self, func, owner, payload):
        count.append(f"{self.name}: {owner.__name__}.{func.__name__}")
        if len(count) - 1 == fail_at:
            raise Injected(f"injected failure at install {fail_at} ({count[-1]})")
        return real[type(self)](self, func, owner, payload)

    for cls in real:
        monkeypatch.setattr(cls, "replacement", counting)
    return count


def test_a_failure_at_every_target_reverts_everything(monkeypatch):
    targets = importable_targets()  # imported now, so every install below happens at once
    release = probe().version
    done = installs(monkeypatch)
    apply_all(PATCHES, release)
    revert_all(PATCHES)
    assert_untouched(targets)
    total = list(done)
    assert total, f"no patch applies on SGLang {release}"
    for k in range(len(total)):  # the k-th fails; patches applied before it and the failing one are reverted
        monkeypatch.undo()
        installs(monkeypatch, fail_at=k)
        with pytest.raises(Injected, match=rf"install {k} "):
            apply_all(PATCHES, release)
        assert_untouched(targets)
    monkeypatch.undo()
