#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
python3 -X importtime -c "import devicelayer" 2> $OUT/importtime.txt
python3 - > $OUT/devprof.txt 2>&1 <<'PY'
import cProfile, pstats, time
t0 = time.perf_counter()
import devicelayer as dl
t1 = time.perf_counter()
pr = cProfile.Profile(); pr.enable()
d = dl.device("cuda:0")
pr.disable()
t2 = time.perf_counter()
print("import", t1 - t0, "device", t2 - t1)
pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
PY
