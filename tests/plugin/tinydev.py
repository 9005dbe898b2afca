"""tinydev: a complete devicelayer backend in one small file, registered only through an entry point.

It is synchronous: every operation finishes before its call returns, so its
events are born complete.  The conformance suite runs on it unchanged.
"""

from __future__ import annotations

import numpy as np

import devicelayer as dl
from devicelayer.events import CompletedEvent, dependency_error


class TinyPool(dl.MemoryPool):
    def _allocate(self, nbytes):
        return np.zeros(nbytes, np.uint8)

    def _release(self, handle, nbytes):
        pass

    def _run(self, label, waits, fn):
        failed = next((w for w in waits if w.error is not None), None)
        if failed is not None:
            return CompletedEvent(label, dependency_error(failed, label), self.device)
        fn()
        return CompletedEvent(label, device=self.device)

    @staticmethod
    def _mem(b):
        return b.handle[b.offset:b.offset + b.nbytes]

    def _upload(self, buffer, data, waits):
        return self._run("upload", waits, lambda: np.copyto(self._mem(buffer), data))

    def _download(self, buffer, data, waits):
        return self._run("download", waits, lambda: np.copyto(data, self._mem(buffer)))

    def _copy(self, dst, src, waits):
        return self._run("copy", waits, lambda: np.copyto(self._mem(dst), self._mem(src)))


class TinyDevice(dl.Device):
    def __init__(self):
        big = 1 << 30
        super().__init__(dl.DeviceInfo(
            id="tiny:0", backend="tiny", index=0, name="tiny synchronous device", vendor="tests",
            device_type="cpu", driver_version="1", api_version="1", kernel_language="python",
            memory_total=1 << 32, max_allocation=1 << 31, compute_units=1, max_work_group_size=big,
            max_work_item_sizes=(big, big, big), subgroup_size=None, local_memory=0,
            dtypes=frozenset({"int32", "float32", "float64", "int64", "uint8"}), unified_memory=True))
        self.pool = TinyPool(self)

    def _build(self, source, entry, options):
        if callable(source):  # a Python language device also runs callables (the graph executor's op kernels)
            return source, None
        namespace = {"np": np}
        try:
            exec(compile(source, entry, "exec", dont_inherit=True), namespace)
        except SyntaxError as exc:
            raise dl.CompileError("tiny: bad source", f"SyntaxError: {exc}") from None
        if entry not in namespace:
            raise dl.CompileError(f"tiny: no function {entry!r}")
        import inspect
        params = inspect.signature(namespace[entry]).parameters.values()
        return namespace[entry], dl.parse_signature([f"{p.annotation} {p.name}" for p in params])

    def _launch(self, program, args, global_size, local_size, waits):
        signature = program.signature or [dl.Arg(f"#{i}", "any", np.dtype(np.uint8)) for i in range(len(args))]
        values = [TinyPool._mem(a).view(s.dtype) if isinstance(a, dl.Buffer) else a for a, s in zip(args, signature)]
        return self.pool._run(f"launch {program.entry}", waits, lambda: program.handle(*values))

    def _synchronize(self):
        pass


class TinyBackend(dl.Backend):
    name = "tiny"

    def __init__(self):
        self._devices = [TinyDevice()]

    def devices(self):
        return self._devices
