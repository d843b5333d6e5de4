# The device command of the decodewg A/B (one call): build D 128 e4m3fn, the GPU suite, two alternating rounds of the
# decode benchmark on the mma.sync kernels (FP8ATTN_PIPELINE=decode) and on decodewg, the sanitizers. Results in $OUT.
export PATH=/usr/local/cuda/bin:$PATH CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++ TORCH_CUDA_ARCH_LIST=9.0a FP8ATTN_HEAD_DIMS=128 FP8ATTN_FP8_KINDS=e4m3fn PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
s=$(date +%s); MAX_JOBS=16 python3 setup.py build_ext --inplace > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }; echo "build $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 220 python3 -m pytest -q -rs tests/gpu > $OUT/tests_gpu.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/tests_gpu.log; grep -E "^FAILED|Error" $OUT/tests_gpu.log | head -10
for r in 1 2; do for side in old new; do if [ $side = old ]; then export FP8ATTN_PIPELINE=decode; else unset FP8ATTN_PIPELINE; fi; timeout 100 python3 -m fp8attn.bench --only decode --peers none --out-dir /tmp/b-$side-$r > $OUT/bench-$side-$r.txt 2>&1; grep '^| [0-9]' $OUT/bench-$side-$r.txt | awk -F'|' -v s=$side -v r=$r '{print s, r, $2,$3,$4,$8,$9,$10,$12}' | tee -a $OUT/ab.txt; done; done
unset FP8ATTN_PIPELINE
for tool in memcheck racecheck; do s=$(date +%s); PYTHONPATH=$PWD timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/sanitize_cases.py > $OUT/sanitizer_$tool.log 2>&1; echo "$tool rc=$? $(( $(date +%s) - s )) s"; tail -2 $OUT/sanitizer_$tool.log; done
