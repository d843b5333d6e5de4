# The device command of the decodewg D 64 / 256 check (one call): build D 64/128/256 e4m3fn, the decode-relevant GPU
# tests, the decode timing at D 64 / 256 on both decode pipelines, the sanitizers.
export PATH=/usr/local/cuda/bin:$PATH CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++ TORCH_CUDA_ARCH_LIST=9.0a
export FP8ATTN_HEAD_DIMS=64,128,256 FP8ATTN_FP8_KINDS=e4m3fn PYTHONUNBUFFERED=1
s=$(date +%s); MAX_JOBS=16 python3 setup.py build_ext --inplace > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 170 python3 -m pytest -q -rs -x tests/gpu/test_gpu_forward.py tests/gpu/test_gpu_nan.py \
  -k "decode or paged or head_dims or random or gqa or nan or graph" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -2 $OUT/tests.log; grep -E "^FAILED|assert" $OUT/tests.log | head -8
for pipe in decode decodewg; do echo "== $pipe"; FP8ATTN_PIPELINE=$pipe PYTHONPATH=$PWD timeout 60 python3 lab/scripts/decode_dims.py 2>&1 | grep -v -i warn; done
for tool in memcheck racecheck; do s=$(date +%s); PYTHONPATH=$PWD timeout 70 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/sanitize_cases.py > $OUT/sanitizer_$tool.log 2>&1; echo "$tool rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/sanitizer_$tool.log; done
