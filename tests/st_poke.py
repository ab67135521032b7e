"""Small safetensors edits for the emitted program's tests, with the standard library alone.

  st_poke.py set IN OUT NAME ELEMENT VALUE [NAME ELEMENT VALUE ...]
      IN with F32 elements set (VALUE: a float, nan, inf or -inf)
  st_poke.py inputs OUT SEED B D CLASS
      a batch for examples/mlp.mtc: x F32 [B, D] normal(0, 1) from SEED, y I32 [B] all CLASS
"""
import json
import random
import struct
import sys


def read(path):
    blob = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", blob[:8])[0]
    return blob, json.loads(blob[8:8 + n]), 8 + n


def tensors(path):
    """name -> the tensor's raw bytes"""
    blob, header, data = read(path)
    return {k: bytes(blob[data + v["data_offsets"][0]:data + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def write(path, tensors):
    """tensors: [(name, dtype, shape, bytes)]"""
    header, at = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


def main(argv):
    if argv[0] == "set":
        blob, header, data = read(argv[1])
        for k in range(3, len(argv), 3):
            begin = header[argv[k]]["data_offsets"][0]
            at = data + begin + 4 * int(argv[k + 1])
            blob[at:at + 4] = struct.pack("<f", float(argv[k + 2]))
        open(argv[2], "wb").write(blob)
    elif argv[0] == "inputs":
        out, seed, b, d, cls = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5])
        rng = random.Random(seed)
        x = struct.pack("<%df" % (b * d), *[rng.gauss(0, 1) for _ in range(b * d)])
        write(out, [("x", "F32", [b, d], x), ("y", "I32", [b], struct.pack("<%di" % b, *[cls] * b))])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
