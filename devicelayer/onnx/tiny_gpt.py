"""``tiny_gpt``: a GPT-2-style decoder with a KV cache, built with onnx.helper in the pattern ``torch.onnx.export``
gives Hugging Face's GPT-2 (seeded random weights).

Inputs: ``input_ids`` (batch, sequence) int64, ``attention_mask`` (batch, past_sequence + sequence) int64,
``position_ids`` (batch, sequence) int64, and per layer ``past_key_values.{i}.key`` / ``.value`` (batch, heads,
past_sequence, head_dim).  Outputs: ``logits`` (batch, sequence, vocab) and ``present.{i}.key`` / ``.value``
(batch, heads, past_sequence + sequence, head_dim).  Every dimension but the sizes of the weights is symbolic;
the head split and merge are the exporters' Shape -> Gather -> Concat -> Reshape arithmetic, the causal mask a
slice of a constant lower-triangular matrix at offsets computed from the shapes, the attention mask added as
(1 - mask) * float32 min, GELU the tanh form (``gelu_new``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def tiny_gpt(seed: int = 0, layers: int = 2, heads: int = 2, head_dim: int = 8, vocab: int = 96,
             positions: int = 512, opset: int = 17, scale: float = 0.5) -> Any:
    """The decoder as an onnx.ModelProto (``scale``: of the random weights; embeddings 1, so that greedy
    decoding wanders over the vocabulary instead of repeating one token)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dim = heads * head_dim
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: Any, dtype: Any = None) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def weight(name: str, *shape: int, scale: float = scale) -> str:
        return const(name, rng.standard_normal(shape) * scale, np.float32)

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out.replace(".", "_"), **attrs))
        return out

    const("i64_0", [0], np.int64)
    const("i64_1", [1], np.int64)
    const("i64_2", [2], np.int64)
    const("s0", 0, np.int64)
    const("s1", 1, np.int64)
    const("s2", 2, np.int64)
    const("heads", [heads], np.int64)
    const("head_dim", [head_dim], np.int64)
    const("hidden", [dim], np.int64)
    const("one_f", 1.0, np.float32)
    const("half", 0.5, np.float32)
    const("min_f", np.finfo(np.float32).min, np.float32)
    const("scale", np.sqrt(head_dim), np.float32)
    const("gelu_c", np.sqrt(2 / np.pi), np.float32)
    const("gelu_k", 0.044715, np.float32)
    const("three", 3.0, np.float32)
    const("causal", np.tril(np.ones((positions, positions), bool))[None, None], bool)
    wte = weight("wte", vocab, dim, scale=1.0)
    weight("wpe", positions, dim, scale=1.0)

    h = node("Add", [node("Gather", ["wte", "input_ids"], "tok_emb"), node("Gather", ["wpe", "position_ids"],
                                                                                 "pos_emb")], "h0")
    shape_x = node("Shape", ["input_ids"], "ids_shape")
    batch = node("Unsqueeze", [node("Gather", [shape_x, "s0"], "batch"), "i64_0"], "batch_1d")
    seq = node("Unsqueeze", [node("Gather", [shape_x, "s1"], "seq"), "i64_0"], "seq_1d")
    # (1 - mask) * min: the additive attention mask, (batch, 1, 1, keys)
    mask = node("Cast", [node("Unsqueeze", ["attention_mask", "i64_1"], "mask_u1")], "mask_f", to=TensorProto.FLOAT)
    mask = node("Unsqueeze", [mask, "i64_2"], "mask_u2")
    additive = node("Mul", [node("Sub", ["one_f", mask], "mask_inv"), "min_f"], "mask_add")
    split_heads = node("Concat", [batch, seq, "heads", "head_dim"], "split_shape", axis=0)
    merge_heads = node("Concat", [batch, seq, "hidden"], "merge_shape", axis=0)

    def layer_norm(x: str, name: str) -> str:
        weight_name, bias_name = f"{name}.weight", f"{name}.bias"
        const(weight_name, 1 + rng.standard_normal(dim) * 0.05, np.float32)
        const(bias_name, rng.standard_normal(dim) * 0.05, np.float32)
        return node("LayerNormalization", [x, weight_name, bias_name], f"{name}.out", axis=-1, epsilon=1e-5)

    def linear(x: str, name: str, fan_in: int, fan_out: int) -> str:
        w = weight(f"{name}.weight", fan_in, fan_out)
        b = weight(f"{name}.bias", fan_out)
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), b], f"{name}.out")

    presents = []
    for i in range(layers):
        p = f"h.{i}"
        a = layer_norm(h, f"{p}.ln_1")
        qkv = linear(a, f"{p}.attn.c_attn", dim, 3 * dim)
        const(f"{p}.split", [dim, dim, dim], np.int64)
        nodes.append(helper.make_node("Split", [qkv, f"{p}.split"], [f"{p}.q", f"{p}.k", f"{p}.v"], axis=2,
                                      name=f"{p}_split"))
        q, k, v = (node("Transpose", [node("Reshape", [f"{p}.{t}", split_heads], f"{p}.{t}_heads")],
                        f"{p}.{t}_t", perm=[0, 2, 1, 3]) for t in "qkv")
        k = node("Concat", [f"past_key_values.{i}.key", k], f"present.{i}.key", axis=2)
        v = node("Concat", [f"past_key_values.{i}.value", v], f"present.{i}.value", axis=2)
        presents += [k, v]
        scores = node("Div", [node("MatMul", [q, node("Transpose", [k], f"{p}.k_T", perm=[0, 1, 3, 2])],
                                   f"{p}.qk"), "scale"], f"{p}.scores")
        # the causal mask: rows keys - queries .. keys of the lower-triangular matrix, columns 0 .. keys
        q_len = node("Gather", [node("Shape", [q], f"{p}.q_shape"), "s2"], f"{p}.q_len")
        k_len = node("Gather", [node("Shape", [k], f"{p}.k_shape"), "s2"], f"{p}.k_len")
        start = node("Unsqueeze", [node("Sub", [k_len, q_len], f"{p}.offset"), "i64_0"], f"{p}.offset_1d")
        end = node("Unsqueeze", [k_len, "i64_0"], f"{p}.k_len_1d")
        rows = node("Slice", ["causal", start, end, "i64_2"], f"{p}.causal_rows")
        causal = node("Slice", [rows, "i64_0", end, node("Add", ["i64_2", "i64_1"], f"{p}.axis3")],
                      f"{p}.causal")
        scores = node("Where", [causal, scores, "min_f"], f"{p}.scores_causal")
        probs = node("Softmax", [node("Add", [scores, additive], f"{p}.scores_masked")], f"{p}.probs", axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, v], f"{p}.ctx")], f"{p}.ctx_t",
                                    perm=[0, 2, 1, 3]), merge_heads], f"{p}.ctx_merged")
        h = node("Add", [h, linear(ctx, f"{p}.attn.c_proj", dim, dim)], f"{p}.res1")
        m = linear(layer_norm(h, f"{p}.ln_2"), f"{p}.mlp.c_fc", dim, 4 * dim)
        inner = node("Mul", ["gelu_c", node("Add", [m, node("Mul", ["gelu_k", node("Pow", [m, "three"],
                                                                                    f"{p}.cube")],
                                                           f"{p}.cube_k")], f"{p}.inner_sum")], f"{p}.inner")
        gelu = node("Mul", [node("Mul", ["half", m], f"{p}.half_m"),
                            node("Add", ["one_f", node("Tanh", [inner], f"{p}.tanh")], f"{p}.one_tanh")],
                    f"{p}.gelu")
        h = node("Add", [h, linear(gelu, f"{p}.mlp.c_proj", 4 * dim, dim)], f"{p}.res2")
    final = layer_norm(h, "ln_f")
    node("MatMul", [final, node("Transpose", [wte], "wte_T", perm=[1, 0])], "logits")

    def tensor(name: str, dtype: int, dims: list[Any]) -> Any:
        return helper.make_tensor_value_info(name, dtype, dims)

    inputs = [tensor("input_ids", TensorProto.INT64, ["batch", "sequence"]),
              tensor("attention_mask", TensorProto.INT64, ["batch", "past_sequence + sequence"]),
              tensor("position_ids", TensorProto.INT64, ["batch", "sequence"])]
    outputs = [tensor("logits", TensorProto.FLOAT, ["batch", "sequence", vocab])]
    for i in range(layers):
        for t in ("key", "value"):
            inputs.append(tensor(f"past_key_values.{i}.{t}", TensorProto.FLOAT,
                                 ["batch", heads, "past_sequence", head_dim]))
            outputs.append(tensor(f"present.{i}.{t}", TensorProto.FLOAT,
                                  ["batch", heads, "past_sequence + sequence", head_dim]))
    graph = helper.make_graph(nodes, "tiny_gpt", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="devicelayer")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
