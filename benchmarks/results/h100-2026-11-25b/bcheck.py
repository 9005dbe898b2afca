import sys, time, numpy as np, onnx
sys.path.insert(0, ".")
from benchmarks.host_vs_onnxruntime import random_feeds, _block
import onnxruntime as ort
from devicelayer import onnx as dlo
name=sys.argv[1]
m = onnx.load(f"{__import__('os').environ['MS']}/{name}.onnx"); feeds = random_feeds(m, 0)
plan = dlo.load(m).compile(["host"])
o=ort.SessionOptions(); o.intra_op_num_threads=16; o.inter_op_num_threads=1; o.execution_mode=ort.ExecutionMode.ORT_SEQUENTIAL; o.log_severity_level=3
s=ort.InferenceSession(f"{__import__('os').environ['MS']}/{name}.onnx", o, providers=["CPUExecutionProvider"])
names=[x.name for x in s.get_outputs()]
f=lambda: plan.run_numpy(feeds); g=lambda: s.run(names, feeds)
for _ in range(50): f(); g()
for pause in (0, 0.05):
  for rep in range(3):
    time.sleep(pause); a=_block(f,200); time.sleep(pause); b=_block(g,200)
    print(f"pause {pause}: dl {a*1e6:.0f} us  ort {b*1e6:.0f} us ratio {a/b:.2f}")
for rep in range(2):
    a=_block(f,2000); print("dl alone 2000", a*1e6)
