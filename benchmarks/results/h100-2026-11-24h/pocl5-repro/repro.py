import sys, numpy as np
import devicelayer as dl
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.runner import run
from devicelayer.ops import names
from devicelayer.tensors import tensor
dev = sys.argv[1]
acts = [{"activation": "relu"}, {"activation": "swish", "activation_alpha": 1.0}, {"activation": "hard_swish"},
        {"activation": "leaky_relu", "activation_alpha": 0.2}, {"activation": "sigmoid"}, {"activation": "gelu"}]
rng = np.random.default_rng(0)
for rep in range(int(sys.argv[2])):
    for a in acts:
        for summand in (False, True):
            attrs = {"pads": [1, 1, 1, 1], **a}
            x = rng.standard_normal((2, 6, 11, 10)).astype(np.float32)
            w = rng.standard_normal((24, 6, 3, 3)).astype(np.float32)
            b = rng.standard_normal(24).astype(np.float32)
            arrays = [x, w, b]
            types = [TensorType.of(t.shape, t.dtype) for t in arrays]
            checked, outs = OPS["conv"].prepare(types, dict(attrs))
            if summand:
                arrays.append(rng.standard_normal(outs[0].shape).astype(np.float32))
            checked, outs = OPS["conv"].prepare([TensorType.of(t.shape, t.dtype) for t in arrays], dict(attrs))
            want = OPS["conv"].reference([t.astype(np.float64) for t in arrays], checked)[0]
            poisoned = tensor(np.full(outs[0].shape, np.nan, np.float32), dev)
            got = run("conv", [tensor(t, dev) for t in arrays], out=poisoned, **attrs)[0].numpy()
            bad = ~np.isclose(got, want, rtol=2e-4, atol=2e-4 * max(1, np.abs(want).max()))
            if bad.any():
                idx = np.argwhere(bad)
                print(rep, a["activation"], summand, int(bad.sum()), "first", idx[:3].tolist(), flush=True)
                if len(sys.argv) > 3:
                    steps = OPS["conv"].plan([TensorType.of(t.shape, t.dtype) for t in arrays], outs, checked, dl.device(dev).info).steps
                    print(steps[0].spec.name)
print("done")
from devicelayer.kernels.render import render_opencl
attrs = {"pads": [1, 1, 1, 1], "activation": "swish", "activation_alpha": 1.0}
types = [TensorType.of(s, np.float32) for s in ((2, 6, 11, 10), (24, 6, 3, 3), (24,))]
checked, outs = OPS["conv"].prepare(types, dict(attrs))
types.append(outs[0])
checked, outs = OPS["conv"].prepare(types, dict(attrs))
steps = OPS["conv"].plan(types, outs, checked, dl.device(dev).info).steps
print(steps[0].spec.name, steps[0].global_size if hasattr(steps[0], "global_size") else steps[0])
import os
open(os.environ["OUT"] + "/swish.cl", "w").write(render_opencl(steps[0].spec))
