"""Can a wheel's native libraries load against another torch? The symbols they take from libtorch that it lacks.

usage: python3 tools/gpu/torch_abi.py KERNEL.whl TORCH.whl [--library NAME ...]

A compiled extension (sglang-kernel's ``common_ops``) is linked against the C++ ABI of the torch it was
built for; the H200 image has torch 2.11.0+cu130 and no room to carry another (a CUDA torch wheel is over
500 MB; a device call carries 64 MiB), so an SGLang release whose kernel wheel was built for a later torch
can run there only if every symbol its libraries take from torch's libraries (``libtorch*``, ``libc10*``)
is exported by the image's. This lists, per shared library of ``KERNEL.whl`` (``--library``: only those
whose file name contains NAME), the undefined C++ symbols (demangled) that no library of ``TORCH.whl``'s
``torch/lib`` defines; none means it may load (nothing else is checked). Needs binutils' ``nm``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Set


def _symbols(path: Path, *flags: str) -> Set[str]:
    out = subprocess.run(["nm", "-D", *flags, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()}


def defined(libraries: Iterable[Path]) -> Set[str]:
    """Every dynamic symbol the shared ``libraries`` define."""
    found: Set[str] = set()
    for lib in libraries:
        found |= _symbols(lib, "--defined-only")
    return found


def missing(library: Path, available: Set[str]) -> List[str]:
    """The undefined C++ symbols of ``library`` that ``available`` lacks, demangled, sorted: mangled (``_Z...``)
    and unversioned (a versioned one, ``...@GLIBCXX_3.4``, is the C++ runtime's, not torch's)."""
    wanted = sorted(s for s in _symbols(library, "--undefined-only")
                    if s.startswith("_Z") and "@" not in s and s not in available)
    if not wanted:
        return []
    return subprocess.run(["c++filt"], input="\n".join(wanted), capture_output=True, text=True,
                          check=True).stdout.splitlines()


def check(kernel_wheel: Path, torch_wheel: Path, names: List[str]) -> Dict[str, List[str]]:
    """``{library inside KERNEL.whl: its missing symbols}`` against ``TORCH.whl``'s ``torch/lib``."""
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(torch_wheel) as z:
            libs = [n for n in z.namelist() if n.startswith("torch/lib/") and ".so" in n]
            z.extractall(tmp, libs)
        available = defined(Path(tmp, n) for n in libs)
        result = {}
        with zipfile.ZipFile(kernel_wheel) as z:
            for name in z.namelist():
                if name.endswith(".so") and (not names or any(part in name for part in names)):
                    z.extract(name, tmp)
                    result[name] = missing(Path(tmp, name), available)
        return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel_wheel", type=Path)
    parser.add_argument("torch_wheel", type=Path)
    parser.add_argument("--library", action="append", default=[], help="only libraries whose name contains this")
    args = parser.parse_args(argv)
    result = check(args.kernel_wheel, args.torch_wheel, args.library)
    for name, symbols in result.items():
        print(f"{name}: {len(symbols)} symbol(s) the torch wheel lacks")
        for symbol in symbols:
            print(f"  {symbol}")
    return 1 if any(result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
