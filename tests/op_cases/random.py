"""Cases for the seeded generators random_uniform, random_normal, bernoulli and multinomial: each device draws
the host's numbers (same Threefry counters), so the reference is exact for integers and close for floats."""

from op_cases import Case, inputs, rand

CASES = []

# random_uniform / random_normal: shape from the input (values unread), dtypes, parameters, seeds, odd sizes
for name, params in (("random_uniform", {"low": -3.0, "high": 5.0}), ("random_normal", {"mean": 1.5, "scale": 0.5})):
    CASES += [
        Case(name, inputs(rand(1000)), {"dtype": "float32"}, id=f"{name}-default"),
        Case(name, inputs(rand(3, 7, 11)), {"dtype": "float32", "seed": 7, **params}, id=f"{name}-params"),
        Case(name, inputs(rand(5, 5)), {"dtype": "float32", "seed": 2 ** 64 - 1}, id=f"{name}-big-seed"),
        Case(name, inputs(rand(4, 129, dtype="float16")), {"dtype": "float16", "seed": 3, **params},
             id=f"{name}-f16", dtype="float16"),
        Case(name, inputs(rand(777, dtype="float64")), {"dtype": "float64", "seed": 11, **params},
             id=f"{name}-f64", dtype="float64"),
        Case(name, inputs(rand(0, 4)), {"dtype": "float32"}, id=f"{name}-empty"),
    ]

# bernoulli: probabilities in [0, 1], output dtypes (float, int, bool, bfloat16), float16/float64 probabilities
CASES += [
    Case("bernoulli", inputs(rand(1000, low=0.0, high=1.0)), {"seed": 5}, id="bernoulli-f32"),
    Case("bernoulli", inputs(rand(6, 50, low=0.0, high=1.0)), {"dtype": "int32", "seed": 9}, id="bernoulli-int32"),
    Case("bernoulli", inputs(rand(6, 50, low=0.0, high=1.0)), {"dtype": "bool"}, id="bernoulli-bool"),
    Case("bernoulli", inputs(rand(300, low=0.0, high=1.0)), {"dtype": "int64", "seed": 1}, id="bernoulli-int64"),
    Case("bernoulli", inputs(rand(300, low=0.0, high=1.0, dtype="float16")), {"seed": 4}, id="bernoulli-f16",
         dtype="float16"),
    Case("bernoulli", inputs(rand(300, low=0.0, high=1.0, dtype="float64")), {"dtype": "uint8", "seed": 4},
         id="bernoulli-f64", dtype="float64"),
    Case("bernoulli", inputs(rand(300, low=0.0, high=1.0, dtype="float16")), {"dtype": "bfloat16", "seed": 6},
         id="bernoulli-to-bf16", dtype="bfloat16"),
]

# multinomial: int32 and int64 results, many classes, one class, float16/float64 logits
CASES += [
    Case("multinomial", inputs(rand(4, 6, low=-2, high=2)), {"sample_size": 50, "seed": 3}, id="multinomial-small"),
    Case("multinomial", inputs(rand(3, 300, low=-4, high=4)), {"sample_size": 7, "dtype": "int64"},
         id="multinomial-many-classes"),
    Case("multinomial", inputs(rand(5, 1)), {"sample_size": 4}, id="multinomial-one-class"),
    Case("multinomial", inputs(rand(2, 5, dtype="float16")), {"sample_size": 40, "seed": 8}, id="multinomial-f16",
         dtype="float16"),
    Case("multinomial", inputs(rand(2, 5, dtype="float64")), {"sample_size": 40, "seed": 8}, id="multinomial-f64",
         dtype="float64"),
]
