"""Misuse of compile, release and launch, and of eager ops on Tensors."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import CompileError, InvalidArgument, UnsupportedOp
from kernels import BROKEN, BROKEN_MARK, INCREMENT, SCALE_ADD, source

from .catalogue import misuse, misuses


def _compile_log_names_the_error(exc: BaseException) -> None:
    assert exc.log and any(mark in exc.log for mark in BROKEN_MARK.values()), exc.log


def _increment_source(s):
    return source(INCREMENT, s.device)


misuses("compile", _increment_source, [
    ("compile-missing-entry", "compile an entry point the source lacks", CompileError, "no_such_kernel",
     lambda s, src: s.device.compile(src, "no_such_kernel")),
    ("compile-entry-not-identifier", "compile entry 'not an identifier'", InvalidArgument, "identifier",
     lambda s, src: s.device.compile(src, "not an identifier")),
    ("compile-source-not-text", "compile the number 42", InvalidArgument, "source must be text",
     lambda s, src: s.device.compile(42, "increment")),
    ("compile-options-not-strings", "compile with options=[1]", InvalidArgument, "options must be strings",
     lambda s, src: s.device.compile(src, "increment", options=[1])),
    ("compile-source-with-nul", "compile source with a NUL character and more after it", InvalidArgument,
     "NUL character", lambda s, src: s.device.compile(src + "\0int x;", "increment")),
    ("compile-source-lone-surrogate", "compile source holding a lone surrogate (U+D800)", InvalidArgument,
     "not text UTF-8 can hold", lambda s, src: s.device.compile(src + "\ud800", "increment")),
    ("compile-bad-signature", "compile with signature 'int int int'", InvalidArgument, "cannot pass",
     lambda s, src: s.device.compile(src, "increment", signature="int int int")),
    ("compile-signature-not-parameters", "compile with signature=[1, 2]", InvalidArgument,
     "parameters such as 'int n'", lambda s, src: s.device.compile(src, "increment", signature=[1, 2])),
])


@misuse("compile-syntax-error", "compile", "compile a kernel with an error in it", CompileError, "broken",
        verify=_compile_log_names_the_error)
def _(s):
    return lambda: s.device.compile(BROKEN[s.device.info.kernel_language], "broken")


@misuse("compile-signature-not-a-sequence", "compile", "compile with signature=42", InvalidArgument,
        "signature")
def _(s):
    return lambda: s.device.compile(source(INCREMENT, s.device), "increment", signature=42)


@misuse("release-twice", "compile", "release a program twice", InvalidArgument, "already released")
def _(s):
    prog = s.device.compile(source(INCREMENT, s.device), "increment", options=["-DRELEASED_TWICE"])
    s.device.release(prog)
    return lambda: s.device.release(prog)


@misuse("release-foreign-program", "compile", "release a program of another device", InvalidArgument,
        "not a program of")
def _(s):
    prog = s.program(device=s.other())
    return lambda: s.device.release(prog)


# -- launch ------------------------------------------------------------------------------------------------------------
class _Launch:
    """A compiled scale_add(y, x, a, n) and two float32 buffers of 16 elements, for launch misuse."""

    def __init__(self, s) -> None:
        self.prog = s.program(SCALE_ADD, "scale_add")
        self.increment = s.program()
        self.y, self.x = s.buffer(64, np.float32), s.buffer(64, np.float32)
        self.freed = s.freed(64, np.float32)
        self.launch = s.device.launch

    def args(self, **change):
        """The valid arguments, with some replaced: ``args(n=2.5)``."""
        named = {"y": self.y, "x": self.x, "a": 1.0, "n": 16, **change}
        return [named["y"], named["x"], named["a"], named["n"]]


L = "launch"
misuses(L, _Launch, [
    ("launch-too-few-args", "launch scale_add with 3 arguments of 4", InvalidArgument, "takes 4 arguments",
     lambda s, k: k.launch(k.prog, k.args()[:3], 16)),
    ("launch-array-for-buffer", "pass a NumPy array where a buffer goes", InvalidArgument, "must be a Buffer",
     lambda s, k: k.launch(k.prog, k.args(y=np.zeros(16, np.float32)), 16)),
    ("launch-buffer-for-scalar", "pass a buffer where a float goes", InvalidArgument, "got a buffer",
     lambda s, k: k.launch(k.prog, k.args(a=k.x), 16)),
    ("launch-float-for-int", "pass 2.5 where an int goes", InvalidArgument, "got a float",
     lambda s, k: k.launch(k.prog, k.args(n=2.5), 16)),
    ("launch-int-overflow", "pass 2**40 as an int32", InvalidArgument, "cannot hold",
     lambda s, k: k.launch(k.prog, k.args(n=1 << 40), 16)),
    ("launch-float-overflow", "pass 1e300 as a float32", InvalidArgument, "would become infinity",
     lambda s, k: k.launch(k.prog, k.args(a=1e300), 16)),
    ("launch-bool-for-int", "pass True where an int goes", InvalidArgument, "got a bool",
     lambda s, k: k.launch(k.prog, k.args(n=True), 16)),
    ("launch-string-for-float", "pass '1.0' where a float goes", InvalidArgument, "got str",
     lambda s, k: k.launch(k.prog, k.args(a="1.0"), 16)),
    ("launch-args-not-a-list", "pass the arguments as a string", InvalidArgument, "args must be a list",
     lambda s, k: k.launch(k.prog, "y x a n", 16)),
    ("launch-not-a-program", "launch None", InvalidArgument, "expected a Program",
     lambda s, k: k.launch(None, k.args(), 16)),
    ("launch-freed-buffer", "launch on a freed buffer", InvalidArgument, "use after free",
     lambda s, k: k.launch(k.prog, k.args(y=k.freed), 16)),
    ("launch-zero-global-size", "launch over 0 work items", InvalidArgument, "must be positive",
     lambda s, k: k.launch(k.prog, k.args(), 0)),
    ("launch-global-size-4d", "launch over a 4-dimensional range", InvalidArgument, "1 to 3",
     lambda s, k: k.launch(k.prog, k.args(), (1, 2, 2, 4))),
    ("launch-global-size-float", "launch over 2.5 work items", InvalidArgument, "positive int",
     lambda s, k: k.launch(k.prog, k.args(), 2.5)),
    ("launch-local-size-too-large", "launch with a group larger than the device allows", InvalidArgument,
     "exceeds the device's limit",
     lambda s, k: k.launch(k.prog, k.args(), 16, s.device.info.max_work_item_sizes[0] + 1)),
    ("launch-local-size-not-dividing", "launch 10 items in groups of 4", InvalidArgument, "not a multiple",
     lambda s, k: k.launch(k.prog, k.args(), 10, 4)),
    ("launch-local-size-dims-differ", "launch a 2-d range with 1-d groups", InvalidArgument,
     "differ in dimensions", lambda s, k: k.launch(k.prog, k.args(), (8, 8), 4)),
    ("launch-wait-not-events", "launch after wait=['x']", InvalidArgument, "not an Event",
     lambda s, k: k.launch(k.prog, k.args(), 16, wait=["x"])),
    ("launch-global-size-bool", "launch over True work items", InvalidArgument, "positive int",
     lambda s, k: k.launch(k.prog, k.args(), True)),
    ("launch-local-size-negative", "launch in groups of -4", InvalidArgument, "must be positive",
     lambda s, k: k.launch(k.prog, k.args(), 16, -4)),
    ("launch-global-size-beyond-int-index", "launch over 2**32 + 16 work items", InvalidArgument,
     "32-bit ints", lambda s, k: k.launch(k.prog, k.args(), (1 << 32) + 16)),
    ("launch-global-size-beyond-device", "launch over (2**31 - 1)**3 work items", InvalidArgument,
     "can index", lambda s, k: k.launch(k.prog, k.args(), (2**31 - 1,) * 3)),
    ("record-global-size-beyond-int-index", "record a launch over 2**32 + 16 work items", InvalidArgument,
     "32-bit ints", lambda s, k: s.device.record().launch(k.prog, k.args(), (1 << 32) + 16)),
    ("launch-float-buffer-for-int-pointer", "pass a float32 buffer where an int pointer goes", InvalidArgument,
     "holds float32", lambda s, k: k.launch(k.increment, [k.x, 16], 16)),
    ("record-float-buffer-for-int-pointer", "record a float32 buffer where an int pointer goes", InvalidArgument,
     "holds float32", lambda s, k: s.device.record().launch(k.increment, [k.x, 16], 16)),
])


@misuse("launch-too-many-work-groups", L, "launch one work-group more than the device allows in dimension 1",
        InvalidArgument, "work-groups, more than the device's")
def _(s):
    groups = s.device.info.max_work_groups[1] + 1
    if groups > 2**31 - 1:
        pytest.skip("the device's work-group count reaches past what a launch may index")
    prog, buf = s.program(), s.buffer(64, np.int32)
    return lambda: s.device.launch(prog, [buf, 16], (1, groups), (1, 1))


def _recorded(s, k, finish: bool = True, release: bool = False, buffer=None):
    """A recording of one scale_add on ``k``'s buffers (``y`` replaced by ``buffer``), finished/released."""
    rec = s.device.record()
    rec.launch(k.prog, k.args(y=buffer or k.y), 16)
    if finish:
        rec.finish()
    if release:
        rec.release()
    return rec


def _recorded_then_freed(s, k):
    buf = s.pool.allocate(64, np.float32)
    rec = _recorded(s, k, buffer=buf)
    s.pool.free(buf).wait(30)
    return rec


misuses(L, _Launch, [
    ("record-wrong-arguments", "record scale_add with 3 arguments of 4", InvalidArgument, "takes 4 arguments",
     lambda s, k: s.device.record().launch(k.prog, k.args()[:3], 16)),
    ("record-after-finish", "record a launch after finish()", InvalidArgument, "after finish()",
     lambda s, k: _recorded(s, k).launch(k.prog, k.args(), 16)),
    ("record-overlapping-copy", "record a copy of a buffer onto itself", InvalidArgument, "overlap",
     lambda s, k: s.device.record().copy(k.y, k.y)),
    ("replay-before-finish", "replay a recording before finish()", InvalidArgument, "before finish()",
     lambda s, k: _recorded(s, k, finish=False).replay()),
    ("replay-after-release", "replay a released recording", InvalidArgument, "after release()",
     lambda s, k: _recorded(s, k, release=True).replay()),
    ("replay-freed-buffer", "replay a recording whose buffer was freed", InvalidArgument, "freed",
     lambda s, k: _recorded_then_freed(s, k).replay()),
    ("replay-wait-not-events", "replay after wait=[42]", InvalidArgument, "not an Event",
     lambda s, k: _recorded(s, k).replay(wait=[42])),
    ("recording-release-twice", "release a recording twice", InvalidArgument, "already released",
     lambda s, k: _recorded(s, k, release=True).release()),
    ("record-after-release", "record a launch into a released recording", InvalidArgument, "after release()",
     lambda s, k: _recorded(s, k, finish=False, release=True).launch(k.prog, k.args(), 16)),
    ("finish-after-release", "finish a released recording", InvalidArgument, "after release()",
     lambda s, k: _recorded(s, k, finish=False, release=True).finish()),
])


@misuse("launch-released-program", L, "launch a released program", InvalidArgument, "was released")
def _(s):
    prog = s.device.compile(source(INCREMENT, s.device), "increment", options=["-DRELEASED"])
    s.device.release(prog)
    buf = s.buffer(64, np.int32)
    return lambda: s.device.launch(prog, [buf, 16], 16)


@misuse("launch-foreign-program", L, "launch a program of another device", InvalidArgument, "compiled for")
def _(s):
    prog = s.program(device=s.other())
    buf = s.buffer(64, np.int32)
    return lambda: s.device.launch(prog, [buf, 16], 16)


@misuse("launch-foreign-buffer", L, "launch on a buffer of another device", InvalidArgument, "is a buffer of")
def _(s):
    k, foreign = _Launch(s), s.buffer(64, np.float32, device=s.other())
    return lambda: k.launch(k.prog, k.args(y=foreign), 16)


@misuse("launch-misaligned-view", L, "launch on a view at offset 4", InvalidArgument, "view alignment")
def _(s):
    if s.device.info.view_alignment <= 4:
        pytest.skip("the device takes views at any 4-byte offset")
    prog = s.program()
    view = s.buffer(64, np.int32).view(4, 32)
    return lambda: s.device.launch(prog, [view, 8], 8)


# -- eager ops ---------------------------------------------------------------------------------------------------------
def _four(s):
    return s.tensor(np.ones(4, np.float32))


misuses(L, _four, [
    ("op-unknown", "run op 'frobnicate' on a Tensor", UnsupportedOp, "no op named 'frobnicate'",
     lambda s, t: dl.ops.run("frobnicate", [t])),
    ("op-array-input", "run relu on a NumPy array", InvalidArgument, "inputs must be Tensors",
     lambda s, t: dl.ops.relu(np.ones(4, np.float32))),
    ("op-no-inputs", "run relu on nothing", InvalidArgument, "needs at least one input",
     lambda s, t: dl.ops.run("relu", [])),
    ("op-unknown-attribute", "run relu with alpha=1", InvalidArgument, "unknown attribute",
     lambda s, t: dl.ops.relu(t, alpha=1)),
    ("op-out-wrong-shape", "run relu into an out= Tensor of another shape", InvalidArgument,
     "out= tensor must be", lambda s, t: dl.ops.run("relu", [t], out=[t.reshape((2, 2))])),
    ("op-out-not-tensors", "run relu with out=3", InvalidArgument, "out= takes a Tensor or a list",
     lambda s, t: dl.ops.relu(t, out=3)),
    ("tensor-masked-array", "make a Tensor of a NumPy masked array", InvalidArgument, "would lose its mask",
     lambda s, t: dl.tensor(np.ma.masked_array(np.ones(3, np.float32), mask=[0, 1, 0]), s.device)),
    ("tensor-complex-to-real", "make a float32 Tensor of complex numbers", InvalidArgument,
     "complex128 values cannot become float32 (the imaginary part would be lost)",
     lambda s, t: dl.tensor(np.array([1 + 2j, 3]), s.device, dtype=np.float32)),
    ("tensor-value-beyond-dtype", "make an int8 Tensor holding 300", InvalidArgument,
     "the int64 value 300 does not fit int8", lambda s, t: dl.tensor([1, 300], s.device, dtype=np.int8)),
    ("tensor-nan-to-integer", "make an int32 Tensor of NaN", InvalidArgument, "NaN or infinity",
     lambda s, t: dl.tensor([np.nan, 1.0], s.device, dtype=np.int32)),
])


@misuse("op-inputs-on-two-devices", L, "add Tensors of two devices", InvalidArgument, "transfer first")
def _(s):
    a, b = s.tensor(np.ones(4, np.float32)), s.tensor(np.ones(4, np.float32), s.other())
    return lambda: dl.ops.add(a, b)
