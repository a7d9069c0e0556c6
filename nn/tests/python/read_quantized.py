"""Read a kiln checkpoint with quantized weights using only Python's
safetensors and numpy, following the layout in docs/ARCHITECTURE.md
("Integer weights"), and check every dequantized weight against a file of
the f32 weights that kiln computed, stored under the codes' names.

usage: python3 read_quantized.py QUANTIZED.safetensors REFERENCE.safetensors
"""

import json
import struct
import sys

import numpy as np
from safetensors.numpy import load_file

QUANT_PREFIX = "kiln.quant."


def metadata(path):
    """The header's string metadata (safetensors' numpy loader drops it)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def unpack(codes, bits):
    """Signed codes [n, k]: int8 is one code per byte; int4 is two per byte,
    the lower k in the low nibble, two's complement in four bits."""
    if bits == 8:
        assert codes.dtype == np.int8, codes.dtype
        return codes.astype(np.int32)
    assert codes.dtype == np.uint8, codes.dtype
    nibbles = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(codes.shape[0], -1).astype(np.int32)
    return np.where(nibbles >= 8, nibbles - 16, nibbles)


def dequantize(codes, scales, spec):
    """The f32 weight [n, k]: each code times its group's scale (a format
    without a group, `int8`, has one scale per row)."""
    kind, _, group = spec.partition("/")
    q = unpack(codes, int(kind[len("int"):]))
    k = q.shape[1]
    per_k = np.repeat(scales, int(group) if group else k, axis=1)[:, :k]
    return (q * per_k).astype(np.float32)


def main(quantized, reference):
    tensors, meta, want = load_file(quantized), metadata(quantized), load_file(reference)
    checked = 0
    for key, spec in sorted(meta.items()):
        if not key.startswith(QUANT_PREFIX):
            continue
        name = key[len(QUANT_PREFIX):]
        scales = tensors[name.rsplit(".", 1)[0] + ".scales"]
        got = dequantize(tensors[name], scales, spec)
        expect = want[name]
        assert got.shape == expect.shape, f"{name}: {got.shape} against {expect.shape}"
        worst = float(np.max(np.abs(got - expect)))
        assert worst <= 1e-6 * float(np.max(np.abs(expect))), f"{name} ({spec}): off by {worst}"
        checked += 1
    assert checked > 0, f"{quantized} has no quantized tensors"
    print(f"python: {checked} code tensors read and dequantized")


if __name__ == "__main__":
    main(*sys.argv[1:])
