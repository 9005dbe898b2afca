"""Greedy decoding with a KV cache over a decoder exported to ONNX (``past_key_values`` in, ``present`` out).

The first step runs the prompt; each later step one token, with the cache of the
steps before.  The cache stays on the device between steps.  Its length is
bucketed so that one specialisation of the plan serves many steps: the cache is
padded at the front to a multiple of ``bucket`` positions that the attention
mask hides, and after each step the oldest padding position is sliced off, so
the cache keeps its length until the padding is used up (then it grows by one
bucket).  Attention does not depend on where a key sits in the cache once
positions come from ``position_ids`` and the padding is masked, so the tokens
are those of an unpadded run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..casting import to_dtype
from ..errors import GraphError, InvalidArgument
from ..interrupts import protected
from ..tensors import Tensor, tensor


@dataclass
class Generation:
    """What a decode produced: the new tokens (batch, count) and how long each step took."""

    tokens: np.ndarray
    prompt_seconds: float
    step_seconds: list[float] = field(default_factory=list)
    prepares: int = 0
    prepare_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        """Decode rate after the prompt (tokens of one sequence per second)."""
        total = sum(self.step_seconds)
        return len(self.step_seconds) / total if total else float("nan")


class Generator:
    """Greedy decoding of an ``OnnxModel`` whose inputs are ``input_ids``, optionally ``attention_mask`` and
    ``position_ids``, and the past keys and values (names containing "past"); whose outputs are the logits and
    the present keys and values (names containing "present"), in the same order as the pasts."""

    def __init__(self, model: Any, devices: Any = "auto", bucket: int = 32, cache_size: int = 8) -> None:
        if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 0:
            raise InvalidArgument(f"bucket must be an int >= 0 (0: no buckets), got {bucket!r}")
        names = [s.name for s in model.inputs]
        if "input_ids" not in names:
            raise InvalidArgument(f"the model has no input 'input_ids' (it takes {names})")
        self.pasts = [s for s in model.inputs if "past" in s.name]
        self.presents = [n for n in model.output_names if "present" in n]
        logits = [n for n in model.output_names if n not in self.presents]
        if not self.pasts or len(self.pasts) != len(self.presents) or not logits:
            raise InvalidArgument(f"the model needs past inputs and as many present outputs, and a logits output "
                                  f"(inputs {names}, outputs {model.output_names})")
        self.logits = logits[0]
        self.has_mask = "attention_mask" in names
        self.has_positions = "position_ids" in names
        extra = set(names) - {"input_ids", "attention_mask", "position_ids"} - {s.name for s in self.pasts}
        if extra:
            raise InvalidArgument(f"inputs {sorted(extra)} are not ones a decode loop can feed")
        ids = next(s for s in model.inputs if s.name == "input_ids")
        self.batch_dim = ids.dims[0] if ids.dims else None
        self.axis = self._sequence_axis(self.pasts[0])
        if bucket and not self.has_mask:
            raise InvalidArgument("bucketed caches need an attention_mask input to hide the padding (bucket=0 runs "
                                  "without)")
        self.bucket = bucket
        self.plan = model.compile(devices, cache_size=cache_size)

    def _sequence_axis(self, spec: Any) -> int:
        dims = spec.dims or ()
        axes = [k for k, d in enumerate(dims) if not isinstance(d, int) and d != self.batch_dim]
        if len(axes) != 1:
            raise InvalidArgument(f"cannot tell the sequence axis of {spec.name!r} from its dimensions {dims}")
        return axes[0]

    def _feeds(self, ids: np.ndarray, positions: np.ndarray, mask: np.ndarray | None,
               cache: Sequence[Any]) -> dict[str, Any]:
        feeds: dict[str, Any] = {"input_ids": ids}
        if self.has_positions:
            feeds["position_ids"] = positions
        if self.has_mask:
            feeds["attention_mask"] = mask
        feeds.update({s.name: c for s, c in zip(self.pasts, cache)})
        return feeds

    def generate(self, prompt: Any, max_new_tokens: int, eos: int | None = None,
                 progress: Callable[[int], None] | None = None) -> Generation:
        """Decode ``max_new_tokens`` tokens greedily after ``prompt`` (batch, length) int64 token ids, stopping
        early where every sequence gave ``eos``; ``progress(k)`` after each token."""
        prompt = np.asarray(prompt)
        if prompt.ndim == 1:
            prompt = prompt[None]
        if prompt.ndim != 2 or prompt.shape[1] == 0 or prompt.dtype.kind not in "iu":
            raise InvalidArgument(f"prompt must be token ids of shape (batch, length >= 1), got {prompt.dtype} "
                                  f"{prompt.shape}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InvalidArgument(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        prompt = to_dtype(prompt, np.int64, "prompt")
        batch, length = prompt.shape
        plan = self.plan
        before = plan.cache_info()
        empty = []
        for s in self.pasts:
            shape = [batch if d == self.batch_dim else 0 if k == self.axis else d for k, d in enumerate(s.dims)]
            if not all(isinstance(d, int) for d in shape):
                raise InvalidArgument(f"cannot make an empty cache for {s.name!r} from its dimensions {s.dims}")
            empty.append(np.zeros(shape, s.dtype))
        t0 = time.perf_counter()
        out: dict[str, Any] = {}
        cache: list[Any] = []
        try:  # however it ends (an error, a Ctrl-C), the Tensors of the last run and the cache are freed
            out = plan.run(self._feeds(prompt, np.arange(length)[None].repeat(batch, 0),
                                       np.ones((batch, length), np.int64), empty))
            token = self._next(out)
            result = Generation(np.empty((batch, 0), np.int64), time.perf_counter() - t0)
            cache = [out[n] for n in self.presents]
            tokens = [token]
            if progress is not None:
                progress(1)
            pads = 0
            while len(tokens) < max_new_tokens and not (eos is not None and np.all(token == eos)):
                t0 = time.perf_counter()
                if self.bucket and pads == 0:
                    cache, pads = self._grow(cache, length)
                mask = None
                if self.has_mask:
                    mask = np.ones((batch, pads + length + 1), np.int64)
                    mask[:, :pads] = 0
                out = plan.run(self._feeds(token[:, None], np.full((batch, 1), length, np.int64), mask, cache))
                token = self._next(out)
                _release(cache)
                cache = [out[n] for n in self.presents]
                if self.bucket:
                    cache = self._drop_first(cache)
                    pads -= 1
                length += 1
                tokens.append(token)
                result.step_seconds.append(time.perf_counter() - t0)
                if progress is not None:
                    progress(len(tokens))
        finally:
            _release(cache)
            _release(list(out.values()))
        after = plan.cache_info()
        result.tokens = np.stack(tokens, axis=1)
        result.prepares = after["misses"] - before["misses"]
        result.prepare_seconds = after["prepare_seconds"] - before["prepare_seconds"]
        return result

    def _next(self, out: dict[str, Any]) -> np.ndarray:
        logits = out[self.logits]
        arr = logits.numpy() if isinstance(logits, Tensor) else np.asarray(logits)
        _release([logits])
        if arr.ndim != 3:
            raise GraphError(f"logits of shape {arr.shape}: expected (batch, sequence, vocab)")
        return arr[:, -1].argmax(-1).astype(np.int64)

    @protected
    def _grow(self, cache: list[Any], length: int) -> tuple[list[Any], int]:
        """The cache padded at the front to the next multiple of the bucket above ``length``."""
        capacity = (length // self.bucket + 1) * self.bucket
        pads = capacity - length
        grown = []
        for c in cache:
            shape = list(c.shape)
            shape[self.axis] = pads
            if isinstance(c, Tensor):
                from .. import ops

                zeros = tensor(np.zeros(shape, c.dtype), c.device)
                grown.append(ops.concat(zeros, c, axis=self.axis))
                _release([zeros, c])
            else:
                grown.append(np.concatenate([np.zeros(shape, c.dtype), c], axis=self.axis))
        return grown, pads

    @protected
    def _drop_first(self, cache: list[Any]) -> list[Any]:
        """Each of ``cache`` without its first position along the sequence axis (a padding position)."""
        from .. import ops

        dropped = []
        for c in cache:
            n = c.shape[self.axis]
            if isinstance(c, Tensor):
                dropped.append(ops.slice(c, starts=[1], ends=[n], axes=[self.axis]))
                _release([c])
            else:
                dropped.append(np.take(c, np.arange(1, n), axis=self.axis))
        return dropped

    def release(self) -> None:
        """Free the plan's specialisations."""
        self.plan.release()


@protected
def _release(tensors: Sequence[Any]) -> None:
    for t in tensors:
        if isinstance(t, Tensor) and t.buffer.base is None and not t.buffer.freed:
            t.device.pool.free(t.buffer, wait=[t.ready])


def onnxruntime_generate(model: Any, prompt: np.ndarray, max_new_tokens: int, session: Any = None) -> Generation:
    """The same greedy decode on onnxruntime (CPU), unpadded: the reference and the peer of ``Generator``."""
    from .testing import onnxruntime_session

    sess = session or onnxruntime_session(model)
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    presents = [n for n in outs if "present" in n]
    logits = [n for n in outs if n not in presents][0]
    pasts = [n for n in ins if "past" in n]
    prompt = np.asarray(prompt, np.int64).reshape(-1, np.shape(prompt)[-1])
    batch, length = prompt.shape
    cache = []
    for n in pasts:
        dims = ins[n].shape
        cache.append(np.zeros([batch if k == 0 else 0 if isinstance(d, str) or d is None else d
                               for k, d in enumerate(dims)], np.float32))

    def feeds(ids: np.ndarray, start: int, cache: list[np.ndarray]) -> dict[str, np.ndarray]:
        f = {"input_ids": ids}
        if "position_ids" in ins:
            f["position_ids"] = np.arange(start, start + ids.shape[1])[None].repeat(batch, 0)
        if "attention_mask" in ins:
            f["attention_mask"] = np.ones((batch, start + ids.shape[1]), np.int64)
        f.update(zip(pasts, cache))
        return f

    t0 = time.perf_counter()
    res = dict(zip(outs, sess.run(outs, feeds(prompt, 0, cache))))
    token = res[logits][:, -1].argmax(-1)
    result = Generation(np.empty((batch, 0), np.int64), time.perf_counter() - t0)
    tokens = [token]
    while len(tokens) < max_new_tokens:
        t0 = time.perf_counter()
        cache = [res[n] for n in presents]
        res = dict(zip(outs, sess.run(outs, feeds(token[:, None], length, cache))))
        token = res[logits][:, -1].argmax(-1)
        length += 1
        tokens.append(token)
        result.step_seconds.append(time.perf_counter() - t0)
    result.tokens = np.stack(tokens, axis=1).astype(np.int64)
    return result
