#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-d
a="--device opencl:0 --device vulkan:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3"
DEVICELAYER_TUNE=0 timeout 100 python3 -X faulthandler -m benchmarks.gpu_vs_torch $a --out /tmp/o3 > $OUT/off.log 2>&1; echo "tune off rc=$?" >> $OUT/rc.txt
timeout 100 python3 -X faulthandler -m benchmarks.gpu_vs_torch $a --out /tmp/o4 > $OUT/on.log 2>&1; echo "tune on rc=$?" >> $OUT/rc.txt
timeout 100 python3 -X faulthandler -m benchmarks.gpu_vs_torch $a --out /tmp/o5 > $OUT/on_stored.log 2>&1; echo "tune on, stored rc=$?" >> $OUT/rc.txt
timeout 60 python3 -X faulthandler -c "
import numpy as np, devicelayer as dl
g = dl.Graph(); a = g.input('a', (512, 512)); g.output('y', g.matmul(a, g.constant(np.ones((512, 512), np.float32))))
for d in ('opencl:0', 'vulkan:0'):
    p = g.compile([d]); p.run_numpy({'a': np.ones((512, 512), np.float32)}); p.release()
print('done')
" > $OUT/small.log 2>&1; echo "small graph rc=$?" >> $OUT/rc.txt
