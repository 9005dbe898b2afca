import time, statistics, numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
T, I, H = 64, 128, 32
rng = np.random.default_rng(0)
W = rng.standard_normal((2, 4*H, I)).astype(np.float32)*0.1
R = rng.standard_normal((2, 4*H, H)).astype(np.float32)*0.1
B = rng.standard_normal((2, 8*H)).astype(np.float32)*0.1
node = helper.make_node("LSTM", ["x","W","R","B"], ["y"], hidden_size=H, direction="bidirectional")
gr = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T,1,I])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(W,"W"), numpy_helper.from_array(R,"R"), numpy_helper.from_array(B,"B")])
m = helper.make_model(gr, opset_imports=[helper.make_opsetid("",17)])
so = ort.SessionOptions(); so.intra_op_num_threads=2
onnx.save(m, "/tmp/models_lstm.onnx")
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
f = {"x": rng.standard_normal((T,1,I)).astype(np.float32)}
for _ in range(50): s.run(None, f)
ts=[]
for _ in range(7):
    t0=time.perf_counter()
    for _ in range(200): s.run(None, f)
    ts.append((time.perf_counter()-t0)/200*1e6)
print("ort us", round(min(ts)), round(statistics.median(ts)))
