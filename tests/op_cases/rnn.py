"""Cases for rnn, gru and lstm: every direction, both layouts, optional inputs, sequence lengths (0 and full
included), clip, custom activations per direction, gru's linear_before_reset, lstm's peepholes and
input_forget, float16 and float64."""

from op_cases import Case, rand

CASES = []


def _maker(T, B, I, H, gates, dirs, layout=0, optional=(), dtype="float32"):
    """Inputs X, W, R and the named optional ones (in ONNX order), weights small enough to keep gates alive."""
    order = ("B", "sequence_lens", "initial_h", "initial_c", "P")
    state = (B, dirs, H) if layout else (dirs, B, H)
    shapes = {"B": (dirs, 2 * gates * H), "initial_h": state, "initial_c": state, "P": (dirs, 3 * H)}
    last = max((order.index(n) for n in optional), default=-1)

    def make(rng):
        x = rand(*((B, T, I) if layout else (T, B, I)), dtype=dtype)(rng)
        arrays = [x, rand(dirs, gates * H, I, dtype=dtype, low=-0.6, high=0.6)(rng),
                  rand(dirs, gates * H, H, dtype=dtype, low=-0.6, high=0.6)(rng)]
        for name in order[:last + 1]:
            if name == "sequence_lens":
                lens = rng.integers(0, T + 1, B).astype("int32")
                lens[0] = T
                arrays.append(lens)
            else:
                arrays.append(rand(*shapes[name], dtype=dtype, low=-0.5, high=0.5)(rng))
        return arrays
    return make


for name, gates in (("rnn", 1), ("gru", 3), ("lstm", 4)):
    everything = ("B", "sequence_lens", "initial_h") + (("initial_c", "P") if name == "lstm" else ())
    CASES += [
        Case(name, _maker(5, 3, 4, 6, gates, 1), {}, id=f"{name}-forward"),
        Case(name, _maker(5, 3, 4, 6, gates, 1, optional=("B",)), {"direction": "reverse", "hidden_size": 6},
             id=f"{name}-reverse-bias"),
        Case(name, _maker(7, 4, 3, 5, gates, 2, optional=everything), {"direction": "bidirectional"},
             id=f"{name}-bidirectional-everything"),
        Case(name, _maker(6, 3, 4, 5, gates, 2, layout=1, optional=everything),
             {"direction": "bidirectional", "layout": 1}, id=f"{name}-batch-first"),
        Case(name, _maker(4, 2, 3, 4, gates, 1, layout=1, optional=("B", "sequence_lens")),
             {"direction": "reverse", "layout": 1}, id=f"{name}-reverse-batch-first-lens"),
        Case(name, _maker(5, 2, 3, 4, gates, 1, optional=("B",)), {"clip": 0.3}, id=f"{name}-clip"),
        Case(name, _maker(20, 2, 16, 64, gates, 2, optional=("B",)), {"direction": "bidirectional"},
             id=f"{name}-wide", rtol=1e-4, atol=1e-4),
        Case(name, _maker(5, 3, 4, 6, gates, 2, optional=everything, dtype="float16"),
             {"direction": "bidirectional"}, id=f"{name}-f16", dtype="float16"),
        Case(name, _maker(5, 3, 4, 6, gates, 2, optional=everything, dtype="float64"),
             {"direction": "bidirectional"}, id=f"{name}-f64", dtype="float64"),
    ]

# activations: custom per direction with alpha/beta consumed in order
CASES += [
    Case("rnn", _maker(4, 2, 3, 4, 1, 2, optional=("B",)),
         {"direction": "bidirectional", "activations": ["LeakyRelu", "HardSigmoid"],
          "activation_alpha": [0.2, 0.3], "activation_beta": [0.4]}, id="rnn-activations"),
    Case("rnn", _maker(4, 2, 3, 4, 1, 1), {"activations": ["Softsign"]}, id="rnn-softsign"),
    Case("rnn", _maker(4, 2, 3, 4, 1, 1), {"activations": ["Relu"]}, id="rnn-relu"),
    Case("gru", _maker(4, 2, 3, 4, 3, 2, optional=("B",)),
         {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "HardSigmoid", "Softplus"],
          "activation_alpha": [0.25], "activation_beta": [0.45]}, id="gru-activations"),
    Case("gru", _maker(5, 3, 4, 6, 3, 1, optional=("B", "sequence_lens", "initial_h")),
         {"linear_before_reset": 1}, id="gru-linear-before-reset"),
    Case("gru", _maker(5, 3, 4, 6, 3, 2, layout=1, optional=("B", "sequence_lens", "initial_h")),
         {"direction": "bidirectional", "layout": 1, "linear_before_reset": 1, "clip": 0.5},
         id="gru-linear-before-reset-bidirectional"),
    Case("lstm", _maker(5, 3, 4, 6, 4, 1, optional=("B", "sequence_lens", "initial_h", "initial_c", "P")),
         {"input_forget": 1}, id="lstm-input-forget"),
    Case("lstm", _maker(4, 2, 3, 4, 4, 1, optional=("B",)),
         {"activations": ["ScaledTanh", "Elu", "ThresholdedRelu"], "activation_alpha": [0.9, 0.7, 0.1],
          "activation_beta": [1.1]}, id="lstm-activations"),
    Case("lstm", _maker(4, 2, 3, 4, 4, 1, optional=("B",)),
         {"activations": ["Affine", "Tanh", "Tanh"], "activation_alpha": [0.3], "activation_beta": [0.2]},
         id="lstm-affine"),
]
