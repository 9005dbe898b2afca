"""EXPERIMENT: the MMA GEMM on vulkan:0 (float16, 4096^3 and others) with its fragments stored straight to y
(.gpu/exp/tile_gather_direct.dlk in place of tile_gather.dlk: no scratch, no acc[]) against the kernel as it is, and
with other tile-band swizzles; ms per call, error against float64.

    python probe_direct.py [--n 4096 ...]"""
import argparse
import sys
import pathlib

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import probe_words as pw  # noqa: E402
from devicelayer.kernels.ops import matmul as mm  # noqa: E402

_orig = mm.shader_source
EXP = pathlib.Path(__file__).parent / "exp"


def use(direct):
    mm.shader_source = (lambda n: (EXP / "tile_gather_direct.dlk").read_text() if n == "tile_gather.dlk"
                        else _orig(n)) if direct else _orig
    mm.kernel_source.cache_clear()
    mm.gemm_spec.cache_clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, action="append")
    args = ap.parse_args()
    import devicelayer as dl
    dev = dl.device("vulkan:0")
    rng = np.random.default_rng(0)
    M = mm.MMA_PIPELINE
    for n in args.n or [4096]:
        a = rng.uniform(-1, 1, (n, n)).astype(np.float16)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float16)
        want = a[:64].astype(np.float64) @ b.astype(np.float64)
        for name, direct, pipe in (("as is", False, None), ("direct", True, None), ("as is", False, None),
                                   ("direct", True, None), ("swizzle 0", False, M._replace(swizzle=0)),
                                   ("swizzle 4", False, M._replace(swizzle=4)),
                                   ("swizzle 16", False, M._replace(swizzle=16)),
                                   ("direct k64s1", True, M._replace(bk=64, stages=1))):
            use(direct)
            try:
                if pipe is None:
                    ms, kname, y = pw.timed(dev, a, b)
                else:
                    with mm.forcing_pipeline(pipe):
                        ms, kname, y = pw.timed(dev, a, b)
                e = float(np.max(np.abs(y[:64].astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
                print(f"{n}^3 {name:14s} {ms:8.3f} ms {2.0 * n ** 3 / ms / 1e9:7.1f} TFLOP/s err {e:.1e} [{kname}]",
                      flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"{n}^3 {name:14s} FAILED {type(exc).__name__}: {str(exc)[:1500]}", flush=True)
    use(False)


if __name__ == "__main__":
    main()
