#!/bin/bash
# the final tree's tiled-kernel, tuning and matrix-unit tests on every device of the GPU machine
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res53; mkdir -p $R; cp .gpu/run53.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py tests/test_tile_tuning.py tests/test_matrix_units.py tests/test_hostcopy.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -4 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res53.tgz res53 && rm -rf res53
