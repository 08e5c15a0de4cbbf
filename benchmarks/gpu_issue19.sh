#!/usr/bin/env bash
# One device run for the correctness work (issue 19) and the kernel benchmarks:
# the GPU tier, the new suites on CUDA, the demo, compute-sanitizer, benchmarks/run.py.
# Usage (on the GPU machine, from the repository root): bash benchmarks/gpu_issue19.sh OUTDIR
set -u
out=${1:-.}
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tilelang-cache} PYTHONUNBUFFERED=1
python3 -c "import tilelang._launch" 2>/dev/null || gcc -O2 -shared -fPIC \
  -I"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" tilelang/_launch.c \
  -o "tilelang/_launch$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== GPU tier"
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_limits.py > "$out/gpu_tier.log" 2>&1
tail -3 "$out/gpu_tier.log"
echo "== issue-19 suites on cuda"
TILELANG_TEST_BACKENDS=interpret,cuda timeout 240 python3 -m pytest -q -n 14 -p no:cacheprovider \
  tests/test_folding.py tests/test_numerics.py tests/test_memory_order.py tests/test_dot.py tests/test_ops_memory.py \
  tests/test_ops_elementwise.py tests/test_dtypes.py tests/test_regressions.py tests/test_limits.py tests/test_loops.py \
  tests/test_examples.py > "$out/suites.log" 2>&1
grep -E "passed|failed|FAILED|Error" "$out/suites.log" | head -20
echo "== demo"; timeout 60 python3 examples/vector_add.py 2>&1 | tail -6
for tool in memcheck racecheck; do
  for ex in examples/vector_add.py examples/matmul.py; do
    printf "== %s %s: " "$tool" "$ex"
    timeout 100 compute-sanitizer --tool "$tool" --print-limit 5 python3 "$ex" -n 100000 > "$out/san.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/san.log" | tail -1
  done
done
echo "== benchmarks"; timeout 150 python3 benchmarks/run.py --out "$out/bench.md" > "$out/bench.log" 2>&1; tail -14 "$out/bench.log"
