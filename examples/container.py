#!/usr/bin/python3
"""container.py — convert and quantize through the library, then look inside the result without a model:
metadata, a Q8_ROW tensor's int8 rows and scales (views of the file), and every checksum.

    PYTHONPATH=python /usr/bin/python3 examples/container.py CHECKPOINT OUT_DIR
"""
import os
import sys

import qmap


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    f32 = os.path.join(sys.argv[2], "container-f32.qmap")
    q8 = os.path.join(sys.argv[2], "container-q8.qmap")
    try:
        r = qmap.convert(sys.argv[1], f32)
        print("convert:  %s, %d tensors, %.2fM parameters, %d bytes" % (r["arch"], r["n_tensors"], r["n_params"] / 1e6,
                                                                       r["output_bytes"]))
        r = qmap.quantize(f32, q8, q8=True)
        print("quantize: %d tensors to Q8_ROW, %d copied; relative RMS error %.3e" % (
            r["n_quantized"], r["n_copied"], r["rel_rms_error"]))
        with qmap.open(q8) as c:
            print(c)
            for key in ("general.architecture", "general.file_type", "tokenizer.kind"):
                print("  %-22s %r" % (key, c.metadata.get(key)))
            name, t = next((n, t) for n, t in c.tensors.items() if isinstance(t, qmap.Q8RowTensor))
            print("  %s: q %s %s, scale %s; row 0 starts %s" % (name, t.q.dtype, t.q.shape, t.scale.shape,
                                                                  t.dequantize()[0, :4]))
            c.verify()
            print("  verify: every checksum matches")
    except qmap.Error as e:
        print("container.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
