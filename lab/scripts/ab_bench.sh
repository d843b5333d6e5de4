#!/usr/bin/env bash
# A/B of benchmark rows on one GPU: the working tree ("new") against other trees (tars of other
# commits' csrc / fp8attn / build files, each NAME=TAR), all built here with the same filter in
# parallel (SKIP_BUILD=1: built by an earlier run; BUILD_ONLY=1: then stop), then benchmarked in alternation (fp8attn only:
# python -m fp8attn.bench --only ONLY --peers none), ROUNDS rounds per KV tile.
#   lab/scripts/ab_bench.sh OUTDIR ONLY ROUNDS KV_TILES NAME=TAR...   (ONLY: prefill / decode; KV_TILES e.g. "0 128";
#                                                                      env: FP8ATTN_HEAD_DIMS etc., as the build)
set -uo pipefail
out=$1 only=$2 rounds=$3 tiles=$4
shift 4
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
names=(new) dirs=("$PWD")
for spec in "$@"; do
  name=${spec%%=*} tarball=${spec#*=}
  [ -n "${SKIP_BUILD:-}" ] || { mkdir -p "/tmp/ab-$name" && tar -xf "$tarball" -C "/tmp/ab-$name"; }
  names+=("$name") dirs+=("/tmp/ab-$name")
done
jobs=$(( $(nproc) / ${#names[@]} ))
build() { (cd "$1" && rm -rf build/temp.* && MAX_JOBS=$jobs python3 setup.py build_ext --inplace >"$out/build-$2.log" 2>&1; echo "build $2 rc=$?") ; }
start=$(date +%s)
if [ -z "${SKIP_BUILD:-}" ]; then
  for i in "${!names[@]}"; do build "${dirs[$i]}" "${names[$i]}" & done
  wait
  echo "builds done in $(( $(date +%s) - start )) s"
  [ -z "${BUILD_ONLY:-}" ] || exit 0
fi
pattern='^| prefill\|^| varlen'
[ "$only" = decode ] && pattern='^| [0-9]'
for r in $(seq "$rounds"); do
  for t in $tiles; do
    for i in "${!names[@]}"; do
      side=${names[$i]} log=/tmp/ab-$only-$side-$t-$r
      (cd "${dirs[$i]}" && timeout 150 python3 -m fp8attn.bench --only "$only" --peers none --kv-tile "$t" --out-dir "$log") \
        >"$log.txt" 2>&1
      grep "$pattern" "$log.txt" | awk -F'|' -v s="$side" -v t="$t" -v r="$r" \
        '{gsub(/ /,"",$0); $1=""; print s, "kv" t, "r" r, $0}' | tee -a "$out/ab.txt"
    done
  done
done
