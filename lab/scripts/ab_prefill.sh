#!/usr/bin/env bash
# A/B of the prefill rows on one GPU: the working tree against a baseline tree (a tar of another
# commit's csrc / fp8attn / build files), both built here with the same filter, benchmarked in
# alternation (fp8attn only: python -m fp8attn.bench --only prefill --peers none).
#   lab/scripts/ab_prefill.sh BASE_TAR OUTDIR [ROUNDS] [KV_TILES]   (env: FP8ATTN_HEAD_DIMS etc., as the build)
set -uo pipefail
base_tar=$1 out=$2 rounds=${3:-2} tiles=${4:-"0 128"}
mkdir -p "$out" /tmp/ab-base
tar -xf "$base_tar" -C /tmp/ab-base
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
build() { (cd "$1" && rm -rf build/temp.* && MAX_JOBS=8 python3 setup.py build_ext --inplace >"$out/build-$2.log" 2>&1; echo "build $2 rc=$?") ; }
start=$(date +%s)
build /tmp/ab-base base & build "$PWD" new & wait
echo "builds done in $(( $(date +%s) - start )) s"
for r in $(seq "$rounds"); do
  for t in $tiles; do
    for side in base new; do
      dir=$PWD; [ $side = base ] && dir=/tmp/ab-base
      (cd "$dir" && timeout 120 python3 -m fp8attn.bench --only prefill --peers none --kv-tile "$t" --out-dir "/tmp/ab-$side-$t-$r") \
        >"/tmp/ab-$side-$t-$r.txt" 2>&1
      grep "^| prefill\|^| varlen" "/tmp/ab-$side-$t-$r.txt" | awk -F'|' -v s=$side -v t=$t -v r=$r \
        '{gsub(/ /,"",$0); print s, "kv" t, "r" r, $2, $3, $4, $5, $6, $7, $11, $14}' | tee -a "$out/ab.txt"
    done
  done
done
