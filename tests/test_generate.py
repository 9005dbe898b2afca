"""Greedy decoding with a KV cache (``devicelayer.onnx.generate`` and ``devicelayer generate``): the tokens of
onnxruntime's unpadded decode on every device, the cache bucketed so that few plans are prepared, and misuse."""

from __future__ import annotations

import json

import numpy as np
import pytest

import devicelayer as dl

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.cli import main as cli  # noqa: E402
from devicelayer.onnx.generate import Generator, onnxruntime_generate  # noqa: E402
from devicelayer.onnx.tiny_gpt import tiny_gpt  # noqa: E402

MODEL = tiny_gpt(seed=3)
PROMPT = np.array([[4, 17, 9, 60, 2]])


@pytest.fixture(scope="module")
def reference():
    return onnxruntime_generate(MODEL, PROMPT, 40)


def test_the_decode_gives_onnxruntimes_tokens_on_every_device(device, reference):
    gen = Generator(dlo.load(MODEL), [device.id], bucket=16)
    try:
        got = gen.generate(PROMPT, 40)
    finally:
        gen.release()
    assert len(set(reference.tokens[0].tolist())) > 3  # the model wanders: a wrong cache would show
    np.testing.assert_array_equal(got.tokens, reference.tokens)
    # prompt, then lengths 5..44 in buckets of 16: caches of 16, 32 and 48 positions
    assert got.prepares == 4 and len(got.step_seconds) == 39


def test_exact_lengths_prepare_a_plan_per_length(reference):
    gen = Generator(dlo.load(MODEL), ["host"], bucket=0)
    got = gen.generate(PROMPT, 12)
    np.testing.assert_array_equal(got.tokens, reference.tokens[:, :12])
    assert got.prepares == 12  # the prompt and 11 lengths


def test_a_batch_of_prompts(reference):
    prompts = np.concatenate([PROMPT, PROMPT[:, ::-1]])
    want = onnxruntime_generate(MODEL, prompts, 10)
    got = Generator(dlo.load(MODEL), ["host"], bucket=8).generate(prompts, 10)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.tokens[0], reference.tokens[0, :10])


def test_eos_stops_the_decode(reference):
    eos = int(reference.tokens[0, 3])
    got = Generator(dlo.load(MODEL), ["host"]).generate(PROMPT, 40, eos=eos)
    first = int(np.argmax(reference.tokens[0] == eos))
    np.testing.assert_array_equal(got.tokens[0], reference.tokens[0, :first + 1])


def test_misuse_is_refused_clearly():
    gen = Generator(dlo.load(MODEL), ["host"])
    with pytest.raises(dl.InvalidArgument, match="prompt must be token ids"):
        gen.generate(np.array([[0.5, 1.5]]), 4)
    with pytest.raises(dl.InvalidArgument, match="prompt must be token ids"):
        gen.generate(np.zeros((1, 0), np.int64), 4)
    with pytest.raises(dl.InvalidArgument, match="max_new_tokens"):
        gen.generate(PROMPT, 0)
    with pytest.raises(dl.InvalidArgument, match="bucket"):
        Generator(dlo.load(MODEL), ["host"], bucket=-1)
    with pytest.raises(dl.InvalidArgument, match="no input 'input_ids'"):
        Generator(dlo.load(dlo.bundled("tiny_cnn")), ["host"])
    assert gen.generate(PROMPT, 2).tokens.shape == (1, 2)  # still usable


def test_the_command_checks_against_onnxruntime(capsys, reference):
    rc = cli(["generate", "--bundled", "tiny_gpt", "--prompt", "4,17,9", "--tokens", "12", "--device", "host",
              "--check", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "devicelayer.generate/1" and doc["check"]["same_tokens"] is True
    assert len(doc["tokens"][0]) == 12 and doc["tokens_per_second"] > 0
    rc = cli(["generate", "--bundled", "tiny_gpt", "--tokens", "3"])
    assert rc == 2 and "give --prompt" in capsys.readouterr().err
