"""tools/gpu/torch_abi.py on shared libraries built here: a kernel library's C++ symbols that a torch wheel's
libraries do not define are listed (the C++ runtime's versioned ones are not torch's), and none when all are."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "gpu"))
import torch_abi  # noqa: E402

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("g++", "nm", "c++filt")), reason="needs g++ and binutils")


def _library(tmp_path: Path, name: str, source: str, *links: Path) -> Path:
    src, lib = tmp_path / f"{name}.cpp", tmp_path / f"{name}.so"
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(lib), str(src), *map(str, links)], check=True)
    return lib


def _wheel(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, file in members.items():
            z.write(file, name)
    return path


def test_the_symbols_a_kernel_takes_from_torch_that_torch_lacks(tmp_path):
    old = _library(tmp_path, "libc10_old", "namespace c10 { void kept() {} }")
    new = _library(tmp_path, "libc10_new", "namespace c10 { void kept() {} void added(int) {} }")
    kernel = _library(tmp_path, "ops", '#include <string>\nnamespace c10 { void kept(); void added(int); }\n'
                      'std::string use() { c10::kept(); c10::added(1); return std::string("x") + "y"; }', new)
    kernel_wheel = _wheel(tmp_path / "kernel.whl", {"pkg/sm90/ops.abi3.so": kernel})
    old_torch = _wheel(tmp_path / "old_torch.whl", {"torch/lib/libc10.so": old})
    new_torch = _wheel(tmp_path / "new_torch.whl", {"torch/lib/libc10.so": new})
    assert torch_abi.check(kernel_wheel, old_torch, ["sm90"]) == {"pkg/sm90/ops.abi3.so": ["c10::added(int)"]}
    assert torch_abi.check(kernel_wheel, new_torch, []) == {"pkg/sm90/ops.abi3.so": []}
    assert torch_abi.check(kernel_wheel, new_torch, ["sm100"]) == {}
    assert torch_abi.main([str(kernel_wheel), str(old_torch)]) == 1
    assert torch_abi.main([str(kernel_wheel), str(new_torch)]) == 0
