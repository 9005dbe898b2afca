import sys, time, numpy as np, onnx, gc, collections, re
sys.path.insert(0, ".")
from benchmarks.host_vs_onnxruntime import random_feeds
from devicelayer import onnx as dlo
from devicelayer.recording import Recording
name=sys.argv[1]; top=int(sys.argv[2])
m = onnx.load(f"/tmp/models/{name}.onnx"); feeds = random_feeds(m, 0)
plan = dlo.load(m).compile(["host"])
for _ in range(10): plan.run_numpy(feeds)
N=30
t0=time.perf_counter()
for _ in range(N): plan.run_numpy(feeds)
print("per call ms", (time.perf_counter()-t0)/N*1e3)
ss=[o.native for o in gc.get_objects() if isinstance(o, Recording) and o.native is not None]
acc=collections.defaultdict(list)
def timed(fn, lab):
    pc=time.perf_counter
    def call():
        t=pc(); fn(); acc[lab].append(pc()-t)
    return call
for s in ss:
    s.calls[:] = [timed(fn, lab) for fn, lab in zip(s.calls, s.labels)]
    print("stretch", len(s), "team", s.team, "short", s.short)
for _ in range(N): plan.run_numpy(feeds)
rows=sorted(((np.median(v)*1e6, k) for k,v in acc.items()), reverse=True)
byop=collections.Counter(); cnt=collections.Counter()
for d,k in rows:
    op=re.search(r"\((\w+)\)$", k).group(1); byop[op]+=d; cnt[op]+=1
for k,v in byop.most_common(): print(f"{v:8.0f} us {cnt[k]:4d} {k}")
print("sum", sum(d for d,_ in rows))
for d,k in rows[:top]: print(round(d,1), k[:120])
print("sum of means", sum(np.mean(v)*1e6 for v in acc.values()))
for s in ss: print("stretch min seconds", s.seconds)
t0=time.perf_counter()
for _ in range(N): plan.run_numpy(feeds)
print("per call ms (wrapped)", (time.perf_counter()-t0)/N*1e3)
