"""Read one section's bytes out of an ELF file (64-bit little-endian; what x86-64 builds emit).

The pass leaves each instrumented point's catalogue entry in the `mallory_catalog` section;
the linker concatenates them, so the final binary carries its own catalogue.
"""

from __future__ import annotations

import struct


def read_section(path: str, name: str) -> bytes | None:
    """The contents of section `name`, or None when the file is not ELF64-LE or lacks it."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0 or shoff + shnum * shentsize > len(data):
        return None

    def header(i: int) -> tuple[int, int, int, int]:
        sh_name, sh_type, _flags, _addr, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return sh_name, sh_type, sh_offset, sh_size

    _, _, str_off, str_size = header(shstrndx)
    names = data[str_off:str_off + str_size]
    wanted = name.encode()
    for i in range(shnum):
        sh_name, sh_type, off, size = header(i)
        end = names.find(b"\0", sh_name)
        if names[sh_name:end] == wanted:
            return b"" if sh_type == 8 else data[off:off + size]  # SHT_NOBITS holds no bytes
    return None
