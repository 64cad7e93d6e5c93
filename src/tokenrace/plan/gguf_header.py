"""A fast reader for a GGUF file's header: metadata and tensor infos, never the tensor data.

gguf.GGUFReader parses every element of every array (the vocabulary: 50k-250k strings), which takes
seconds; the planner needs only scalars, short arrays and each tensor's shape and type. Long arrays
are skipped and reported by their length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeAlias

from tokenrace.errors import InvalidInput

# GGUF metadata value types -> struct codes (8 = string, 9 = array are handled apart).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
SHORT_ARRAY = 64  # longer arrays come back as LongArray(length)


@dataclass(frozen=True)
class LongArray:
    length: int


# A metadata value: a number, a flag, a string, a short array of them, or a long array by its length.
GGUFValue: TypeAlias = "int | float | bool | str | LongArray | list[GGUFValue]"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_name: str  # GGML type, e.g. Q4_1
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    metadata: dict[str, GGUFValue]
    tensors: tuple[TensorInfo, ...]


class _Reader:
    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh

    def unpack(self, code: str) -> Any:
        size = struct.calcsize("<" + code)
        data = self.fh.read(size)
        if len(data) != size:
            raise EOFError("truncated GGUF header")
        return struct.unpack("<" + code, data)[0]

    def string(self) -> str:
        length = self.unpack("Q")
        return self.fh.read(length).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.fh.seek(self.unpack("Q"), 1)

    def value(self, vtype: int) -> GGUFValue:
        if vtype in _SCALARS:
            scalar: int | float | bool = self.unpack(_SCALARS[vtype])
            return scalar
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array()
        raise ValueError(f"unknown GGUF value type {vtype}")

    def array(self) -> list[GGUFValue] | LongArray:
        etype, count = self.unpack("I"), self.unpack("Q")
        if count <= SHORT_ARRAY:
            return [self.value(etype) for _ in range(count)]
        if etype in _SCALARS:
            self.fh.seek(count * struct.calcsize("<" + _SCALARS[etype]), 1)
        elif etype == _STRING:
            for _ in range(count):
                self.skip_string()
        else:  # arrays of arrays: walk them
            for _ in range(count):
                self.value(etype)
        return LongArray(count)


def _tensor(r: _Reader, quant_sizes: dict[int, tuple[int, int]], type_names: dict[int, str]) -> TensorInfo:
    name = r.string()
    dims = tuple(r.unpack("Q") for _ in range(r.unpack("I")))
    ggml_type = r.unpack("I")
    r.unpack("Q")  # data offset
    elements = 1
    for d in dims:
        elements *= d
    block, size = quant_sizes.get(ggml_type, (1, 0))
    return TensorInfo(name, dims, type_names.get(ggml_type, str(ggml_type)), elements, elements // block * size)


def read_header(path: Path) -> GGUFHeader:
    import gguf  # only for the GGML type table: block sizes and names  # noqa: PLC0415 - import cost: gguf (~0.3 s) only when a GGUF file is read

    quant_sizes = {int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()}
    type_names = {int(t): t.name for t in gguf.GGMLQuantizationType}
    try:
        with path.open("rb") as fh:
            r = _Reader(fh)
            if fh.read(4) != b"GGUF":
                raise InvalidInput("model", f"{path} is not a GGUF file")
            version = r.unpack("I")
            if version not in (2, 3):
                raise InvalidInput("model", f"{path}: GGUF version {version} is not supported (big-endian or too new)")
            n_tensors, n_kv = r.unpack("Q"), r.unpack("Q")
            metadata: dict[str, GGUFValue] = {}
            for _ in range(n_kv):
                key = r.string()
                metadata[key] = r.value(r.unpack("I"))
            tensors = tuple(_tensor(r, quant_sizes, type_names) for _ in range(n_tensors))
    except (OSError, EOFError, ValueError, struct.error) as err:
        raise InvalidInput("model", f"cannot read GGUF {path}: {err}") from None
    return GGUFHeader(metadata, tensors)
