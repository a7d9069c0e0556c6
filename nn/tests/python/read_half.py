"""Read a kiln checkpoint's F16 or BF16 tensors using only Python's
safetensors and numpy, and check each against the f32 values kiln stored
under the same name in a second file.

F16 files load through safetensors' numpy loader. numpy has no bfloat16,
so BF16 tensors are read from the safetensors layout itself: an 8-byte
little-endian header length, a JSON header giving each tensor's dtype,
shape and byte offsets after the header, then the data; a bf16 is the
upper half of an f32's bits.

usage: python3 read_half.py HALF.safetensors REFERENCE.safetensors
"""

import json
import struct
import sys

import numpy as np
from safetensors.numpy import load_file


def header(path):
    """The JSON header and where the data starts."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def read_bf16(path, entry, start):
    """One BF16 tensor as f32: each 16-bit value shifted into an f32's upper half."""
    lo, hi = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(start + lo)
        raw = np.frombuffer(f.read(hi - lo), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(entry["shape"])


def main(half, reference):
    head, start = header(half)
    entries = {name: e for name, e in head.items() if name != "__metadata__"}
    dtypes = {e["dtype"] for e in entries.values()}
    assert len(dtypes) == 1 and dtypes <= {"F16", "BF16"}, f"{half}: dtypes {dtypes}"
    (dtype,) = dtypes
    if dtype == "F16":
        got = {name: t.astype(np.float32) for name, t in load_file(half).items()}
    else:
        got = {name: read_bf16(half, e, start) for name, e in entries.items()}
    want = load_file(reference)
    assert sorted(got) == sorted(want), f"names {sorted(got)} against {sorted(want)}"
    for name, values in got.items():
        assert values.shape == want[name].shape, f"{name}: {values.shape} against {want[name].shape}"
        assert np.array_equal(values, want[name]), f"{name}: {values} against {want[name]}"
    print(f"{len(got)} tensors read as {dtype}, equal to kiln's f32 values")


if __name__ == "__main__":
    main(*sys.argv[1:])
