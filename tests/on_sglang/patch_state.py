"""What "nothing stays patched or registered" means, checked on the real classes."""

from sglang_spec_plugins.engine.algorithm import _PolicyMethods
from sglang_spec_plugins.patches import PATCHES


def importable_targets():
    """``{target: (owner, attribute, function)}`` for every patch target whose
    module imports here (importing them), as they are now."""
    found = {}
    for patch in PATCHES:
        for target in patch.alternatives:
            try:
                resolved = target.resolve()
            except ImportError:  # a backend whose kernel package a CPU cannot import
                continue
            if resolved:
                found[str(target)] = resolved
    assert found, "no patch target could be imported"
    return found


def plugin_algorithms():
    """Names of the plugin algorithms SGLang's registry holds."""
    from sglang.srt.speculative import spec_registry

    return sorted(n for n, algo in spec_registry._REGISTRY.items() if isinstance(algo, _PolicyMethods))


def assert_untouched(targets):
    """No plugin algorithm registered, no patch applied or waiting, every target the original function."""
    assert plugin_algorithms() == []
    assert not any(p.applied for p in PATCHES)
    for name, (owner, attr, func) in targets.items():
        assert vars(owner)[attr] is func, f"{name} is still patched"


def snapshot(targets):
    """What SGLang holds now: every registered algorithm (name -> object), and for
    every patch target the function its owner holds and whether its patch is
    applied; compare two with ``==``."""
    from sglang.srt.speculative import spec_registry

    return {"registry": dict(spec_registry._REGISTRY), "applied": {p.name: p.applied for p in PATCHES},
            "functions": {name: vars(owner)[attr] for name, (owner, attr, _) in targets.items()}}


def assert_unchanged(before, targets, what):
    """SGLang holds exactly what it held in ``before`` (after ``what`` refused)."""
    now = snapshot(targets)
    for key in before:
        changed = sorted(k for k in before[key].keys() | now[key].keys() if before[key].get(k) is not now[key].get(k))
        assert not changed, f"after {what}, {key} changed: {changed}"
