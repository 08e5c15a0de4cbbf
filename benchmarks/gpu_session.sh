#!/usr/bin/env bash
# One device run: the GPU test tier, the op suites on CUDA, compute-sanitizer over the
# examples, and the benchmarks. Usage (on the GPU machine): bash benchmarks/gpu_session.sh OUTDIR
set -u
out=${1:-.}
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tilelang-cache} PYTHONUNBUFFERED=1
# the launcher extension, in place (what `pip install -e .` builds), for a checkout run from PYTHONPATH
python3 -c "import tilelang._launch" 2>/dev/null || gcc -O2 -shared -fPIC \
  -I"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" tilelang/_launch.c tilelang/_fast_path.c \
  -o "tilelang/_launch$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
echo "== GPU tier"; python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_limits.py \
  tests/test_fuzz.py tests/test_autotune.py tests/test_torch.py tests/test_torch_ops.py tests/test_torch_attention.py 2>&1 | tail -4
echo "== op suites on cuda"
TILELANG_TEST_BACKENDS=interpret,cuda timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider \
  tests/test_ops_elementwise.py tests/test_ops_reduce.py tests/test_ops_shape.py tests/test_ops_memory.py \
  tests/test_dot.py tests/test_loops.py tests/test_examples.py tests/test_folding.py tests/test_numerics.py \
  tests/test_memory_order.py tests/test_dtypes.py tests/test_regressions.py tests/test_limits.py \
  tests/test_async_copies.py tests/test_aligned.py tests/test_tma.py tests/test_attention.py > "$out/suites.log" 2>&1
grep -E "passed|failed|FAILED" "$out/suites.log" | head -20
for tool in memcheck racecheck; do
  for ex in examples/*.py; do
    printf "== %s %s: " "$tool" "$ex"
    timeout 120 compute-sanitizer --tool "$tool" --print-limit 5 python3 "$ex" > "$out/san.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error" "$out/san.log" | tail -1
  done
done
echo "== fuzz campaign on cuda (issue 18), then compute-sanitizer over a sample of its programs"
timeout 420 python3 -m tilelang.testing.fuzz --minutes 5 --jobs 12 --backends interpret,cuda --sample 20 \
  --out "$out/fuzz" 2>&1 | tail -1
samples=$(ls "$out"/fuzz/job*/sample/*.py 2>/dev/null | head -200)
for tool in memcheck racecheck; do
  printf "== %s over %s sampled programs: " "$tool" "$(echo "$samples" | wc -w)"
  timeout 300 compute-sanitizer --tool "$tool" --print-limit 5 python3 -m tilelang.testing.fuzz --replay $samples \
    --backends interpret,cuda > "$out/san.log" 2>&1
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/san.log" | tail -1; grep "^fuzz:" "$out/san.log" | tail -1
done
echo "== demo"; timeout 60 python3 examples/vector_add.py 2>&1 | tail -5
echo "== mma.sync ceiling"; timeout 60 python3 benchmarks/mma_peak.py 2>&1 | grep -v Warning
echo "== benchmarks"; timeout 200 python3 benchmarks/run.py --out "$out/bench.md" > "$out/bench.log" 2>&1; tail -20 "$out/bench.log"
echo "== launch"; timeout 120 python3 benchmarks/launch.py 2>&1 | grep -v Warning | tail -8
echo "== launch, piece by piece"; timeout 120 python3 benchmarks/launch_breakdown.py 2>&1 | grep -v Warning | tail -3
