"""Cases for cumsum and cumprod: axes, exclusive, reverse, short and long lines, integers."""

from op_cases import Case, inputs, rand

CASES = []
for name in ("cumsum", "cumprod"):
    low, high = (0.8, 1.25) if name == "cumprod" else (-2, 2)
    for shape, axis in (((7,), 0), ((3, 5, 4), 1), ((3, 5, 4), -1), ((3, 5, 4), 0), ((2, 700), 1), ((500, 3), 0),
                        ((2, 1000, 3), -2)):
        for exclusive in (False, True):
            for reverse in (False, True):
                CASES.append(Case(name, inputs(rand(*shape, low=low, high=high)),
                                  {"axis": axis, "exclusive": exclusive, "reverse": reverse},
                                  id=f"{name}-{shape}-{axis}-{exclusive}-{reverse}"))
    for dtype in ("int32", "int64", "int8", "uint32", "float16", "float64"):
        lo, hi = ((0.8, 1.25) if name == "cumprod" else (-2, 2)) if dtype[0] == "f" else \
            ((-3, 4) if name == "cumprod" else (-50, 50))
        if dtype[0] == "u":
            lo = 0
        CASES.append(Case(name, inputs(rand(4, 9, dtype=dtype, low=lo, high=hi)), {"axis": 1, "exclusive": True},
                          id=f"{name}-{dtype}", dtype=dtype))
        CASES.append(Case(name, inputs(rand(2, 300, dtype=dtype, low=lo, high=hi)), {"axis": 1, "reverse": True},
                          id=f"{name}-{dtype}-long", dtype=dtype))
    CASES.append(Case(name, inputs(rand(3, 0)), {"axis": 1}, id=f"{name}-empty"))
