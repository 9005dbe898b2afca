import sys, json, onnxruntime as ort, onnx, collections, os
sys.path.insert(0,".")
from benchmarks.host_vs_onnxruntime import random_feeds
name=sys.argv[1]
m=onnx.load(f"/tmp/models/{name}.onnx"); feeds=random_feeds(m,0)
o=ort.SessionOptions(); o.intra_op_num_threads=16; o.inter_op_num_threads=1; o.enable_profiling=True; o.profile_file_prefix="/tmp/ortp"
s=ort.InferenceSession(f"/tmp/models/{name}.onnx", o, providers=["CPUExecutionProvider"])
for _ in range(30): s.run(None, feeds)
p=s.end_profiling(); ev=json.load(open(p)); os.remove(p)
by=collections.defaultdict(list); info={}
for e in ev:
    if e.get("cat")=="Node" and e["name"].endswith("_kernel_time"):
        by[e["name"]].append(e["dur"]); info[e["name"]]=(e["args"].get("op_name"), e["args"].get("input_type_shape"), e["args"].get("output_type_shape"))
rows=sorted(((sorted(v)[len(v)//2],k) for k,v in by.items()), reverse=True)
for d,k in rows[:int(sys.argv[2]) if len(sys.argv)>2 else 20]: print(d, info[k][0], k[:70], info[k][1], info[k][2])
