"""A TVM executable written as a shared library without its constants passing through LLVM.

Why: a Relax VM executable carries every weight it was built with.  TVM's `export_library`
packs them into the library through LLVM (`runtime.ModulePackImportsToLLVM`): the serialized
executable, that blob with its length in front, an LLVM constant array of it and the object
code emitted from that array are alive together, so exporting GPT-2 small (475 MiB of weights)
peaked at 2.9 GB, six times its weights, where the build before it had needed 0.5 GB.

The library only needs the blob under one symbol (`runtime.ModuleImportsBlobName`), read with
dlsym when TVM loads it.  So the blob is written to a file as TVM serializes it
(`runtime.ModulePackImportsToTensor`, the same bytes LLVM would have been handed) and an
assembler file includes it (`.incbin`): the system compiler that links the library anyway copies
it from disk into the object, in its own process, and this one holds the weights once.
"""

from __future__ import annotations

import os
import platform

import numpy as np
import tvm


def _pack_imports(module, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
    """`export_library`'s `fpack_imports`: the imported modules' blob as an assembler file."""
    blob = tvm.get_global_func("runtime.ModulePackImportsToTensor")(module)
    data = os.path.join(workspace_dir, "devc.bin")
    np.from_dlpack(blob).tofile(data)  # the Tensor's own bytes, not a copy
    del blob
    symbol = prefix + tvm.get_global_func("runtime.ModuleImportsBlobName")()
    # x86-64's large-data section: a blob over 2 GiB placed after the code, where no
    # 32-bit offset from the code has to reach past it
    section = '.section .lrodata,"al"' if platform.machine() in ("x86_64", "AMD64") else \
        '.section .rodata,"a"'
    asm = os.path.join(workspace_dir, "devc.S")
    with open(asm, "w") as f:
        f.write(f"{section}\n.globl {symbol}\n.type {symbol}, @object\n.p2align 4\n"
                f'{symbol}:\n.incbin "{data}"\n.size {symbol}, .-{symbol}\n'
                '.section .note.GNU-stack,"",@progbits\n')
    return asm


def export_library(executable, path: str) -> None:
    """`executable.export_library(path)`, with the constants written as described above (a
    system library, whose symbols carry a prefix registered at load, keeps TVM's own way)."""
    module = executable.mod
    system = any(m.kind == "llvm" and m.get_function("__tvm_is_system_module")()
                 for m in module._collect_dso_modules())
    if system:
        executable.export_library(path)
        return
    module.export_library(path, fpack_imports=_pack_imports)
