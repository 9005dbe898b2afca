"""The cases of ONNX's node suite that devicelayer does not pass, each with its reason: one explicit list, checked
strictly by ``tests/test_onnx_node_suite.py`` (a case that starts passing fails as XPASS until it is removed).

Kinds:
- ``op``: an op devicelayer does not run;
- ``semantics``: refused on purpose, or an answer that differs from the suite's reference by choice;
- ``harness``: ONNX's own comparison cannot judge the case;
- ``random``: draws that differ from the suite's by design, which can still match it by chance (so not strict: a
  chance pass is reported as XPASS, not failed).
A dtype a device lacks (``DeviceInfo.dtypes``) is derived by the test from each case's inputs and outputs;
``dtype`` entries here name what that derivation cannot see (a dtype used inside the case).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Expected:
    """Cases whose names match ``pattern`` fail, for ``reason``, on every device or on the backends named."""

    pattern: str
    kind: str
    reason: str
    devices: tuple[str, ...] | None = None


EXPECTED: list[Expected] = [
    # -- ops devicelayer does not run -------------------------------------------------------------------------------
    Expected(r"^test_(string_concat|string_split|regex_full_match|strnormalizer|equal_string|"
             r"ai_onnx_ml_label_encoder_(string|tensor))", "op",
             "strings: devicelayer's tensors hold numbers and bool (UnsupportedOp for a STRING tensor)"),
    Expected(r"^test_image_decoder_", "op", "ImageDecoder decodes image files (JPEG, PNG, ...): a codec, not tensor "
                                            "arithmetic"),
    Expected(r"^test_(adagrad|adam|momentum|nesterov_momentum)", "op",
             "the ai.onnx.preview.training domain (optimizer steps): inference only"),
    Expected(r"^test_flexattention(?!.*_expanded)", "op",
             "FlexAttention is in the ai.onnx.preview domain, whose ops devicelayer does not run (its expanded forms "
             "pass)"),
    Expected(r"^test_ai_onnx_ml_(array_feature_extractor|binarizer|tree_ensemble)", "op",
             "the ai.onnx.ml domain (classical machine learning: trees, feature extraction) is not run"),
    Expected(r"^test_tfidfvectorizer_", "op", "TfIdfVectorizer (n-gram counting over token ids) is not run"),
    # -- refused, or answered otherwise, on purpose ---------------------------------------------------------------------
    Expected(r"^test_training_dropout(_default)?(_mask)?$", "semantics",
             "Dropout in training mode with a ratio above 0 draws a random mask; the suite's masks come from NumPy's "
             "global generator, which no runtime reproduces (devicelayer refuses rather than answer otherwise)"),
    Expected(r"^test_bernoulli", "random",
             "Bernoulli draws from devicelayer's counter-based generator (the same numbers on every device); the "
             "suite's values come from NumPy's global generator, and an unseeded case draws afresh each run"),
    Expected(r"^test_dft_inverse(_opset19)?$", "semantics",
             "the reference holds float32 FFT rounding noise (1.9e-7 where the exact result is 0, tolerance 1e-7); "
             "devicelayer's transform is exact there"),
    Expected(r"^test_resize_downsample_scales_(cubic|linear)_align_corners$", "semantics",
             "align_corners with a non-integer scale x length: devicelayer maps coordinates as onnxruntime does (the "
             "integer output length), ONNX's reference uses the scale"),
    Expected(r"^test_attention_4d_causal_fp16_expanded$", "semantics",
             "float16 attention computed in float32 (2 float16 ulp from the reference, which rounds to float16 at "
             "every step, outside the 1e-3 tolerance)", ("vulkan", "cuda")),
    # -- cases ONNX's comparison cannot judge ------------------------------------------------------------------------------
    Expected(r"^test_loop16_seq_none$", "harness",
             "the expected output is a sequence holding a 0-d tensor, which ONNX's runner cannot compare "
             "(len() of an unsized array); onnxruntime fails it the same way"),
]
