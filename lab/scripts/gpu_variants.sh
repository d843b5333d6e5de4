#!/usr/bin/env bash
# Compare several revisions on one GPU machine in one call (the device tool copies the working tree,
# not the git history, so the revisions are exported first):
#
#   lab/scripts/gpu_variants.sh prepare REV...   here: each revision's sources -> variants/<short sha>
#                                            (untracked: the device copy carries them)
#   lab/scripts/gpu_variants.sh run [OUTDIR]     on the GPU machine: builds every variant in parallel, then
#                                            per variant the GPU suite and the benchmark (peers
#                                            measured with the first variant only), and prints the
#                                            fp8attn column of every variant side by side
#
# Knobs (env): FP8ATTN_ARCHS (default sm90a), BENCH_ARGS (e.g. "--only decode"), ALL_PEERS=1 (every
# variant's benchmark runs the peers too: the same work between fp8attn's rows, so the same thermal state --
# without peers a variant's rows run back to back, hotter: identical D 256 code measured 7 % slower
# second, lab-notes:lab/h200-logs/48-*), FP8ATTN_HEAD_DIMS (build filter), STEP_TIMEOUT
# (seconds per test / bench step, default 300), SKIP_TESTS=1 (benchmark only: diagnostic builds that
# compute wrong results on purpose), SANITIZE=racecheck (or memcheck: that
# compute-sanitizer tool over tests/gpu/sanitize_cases.py per variant, its summary line printed), KEEP_ALL=1 (keep each variant's bench.md / .png and
# build.rc: by default only bench.json, and build.log of a failed build, stay in OUTDIR -- the device
# tool brings back at most 8 files). Remove variants/ afterwards.
set -uo pipefail
cd "$(dirname "$0")/../.."
cmd=${1:-}
shift || true
if [ "$cmd" = prepare ]; then
  [ $# -gt 0 ] || { echo "usage: $0 prepare REV..."; exit 2; }
  for rev in "$@"; do
    sha=$(git rev-parse --short "$rev") || exit 1
    rm -rf "variants/$sha"
    mkdir -p "variants/$sha"
    git archive "$sha" setup.py pyproject.toml CMakeLists.txt cmake csrc fp8attn tests | tar -x -C "variants/$sha"
    echo "variants/$sha <- $rev"
  done
  exit 0
fi
[ "$cmd" = run ] || { echo "usage: $0 prepare REV... | run [OUTDIR]"; exit 2; }
mkdir -p "${1:-variants-results}"
OUTDIR=$(cd "${1:-variants-results}" && pwd)
T=${STEP_TIMEOUT:-300}
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 FP8ATTN_ARCHS=${FP8ATTN_ARCHS:-sm90a}
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc CUDAHOSTCXX=/usr/bin/g++; fi  # see gpu_check.sh
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$(python3 -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}.{c[1]}" + ("a" if c == (9, 0) else ""))')
  export TORCH_CUDA_ARCH_LIST
fi
mapfile -t vars < <(ls -d variants/*/ 2>/dev/null | xargs -n1 basename)
[ ${#vars[@]} -gt 0 ] || { echo "no variants/: run '$0 prepare REV...' first"; exit 2; }
jobs=$(( $(nproc) / ${#vars[@]} ))
[ "$jobs" -ge 1 ] || jobs=1
start=$(date +%s)
for v in "${vars[@]}"; do
  mkdir -p "$OUTDIR/$v"
  (cd "variants/$v" && MAX_JOBS=$jobs python3 setup.py build_ext --inplace >"$OUTDIR/$v/build.log" 2>&1
   echo $? >"$OUTDIR/$v/build.rc") &
done
wait
echo "built ${#vars[@]} variants in $(( $(date +%s) - start )) s (MAX_JOBS=$jobs each)"
rc=0
peers=all
for v in "${vars[@]}"; do
  if [ "$(cat "$OUTDIR/$v/build.rc")" != 0 ]; then
    echo "== $v: BUILD FAILED"; tail -20 "$OUTDIR/$v/build.log"; rc=1; continue
  fi
  rm -f "$OUTDIR/$v/build.log"
  if [ -z "${SKIP_TESTS:-}" ]; then
    echo "== $v: GPU tests"
    (cd "variants/$v" && PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout "$T" python3 -m pytest -q tests/gpu 2>&1 | tail -2) || rc=1
  fi
  (cd "variants/$v" && PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} FP8ATTN_COMMIT=$v timeout "$T" \
     python3 -m fp8attn.bench --peers "$peers" --out-dir "$OUTDIR/$v" ${BENCH_ARGS:-} >/dev/null 2>&1) ||
    { echo "   bench failed"; rc=1; }
  if [ -n "${SANITIZE:-}" ]; then
    (cd "variants/$v" && PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout "$T" compute-sanitizer --tool "$SANITIZE"        --error-exitcode 9 python3 tests/gpu/sanitize_cases.py 2>&1 | grep -E "SUMMARY|Error|error" | tail -3) || rc=1
  fi
  [ -n "${ALL_PEERS:-}" ] || peers=none
done
python3 - "$OUTDIR" "${vars[@]}" <<'EOF'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
runs = {n: json.load(open(os.path.join(out, n, "bench.json")))["rows"] for n in names
        if os.path.exists(os.path.join(out, n, "bench.json"))}
if not runs:
    sys.exit(0)
first = runs[next(iter(runs))]
def key(r):
    return (r["kind"], r.get("B"), r.get("H"), r.get("Hkv"), r.get("Sq"), r.get("Sk"), r.get("D"), r.get("causal"))
print("\nfp8attn (TFLOP/s prefill, GB/s decode) per variant; peers from the first")
print(f"{'row':44s} {'flash':>7s} {'cudnn8':>7s} " + " ".join(f"{n:>9s}" for n in runs))
for r in first:
    if "error" in r:
        continue
    vals = []
    for rows in runs.values():
        m = [x for x in rows if "error" not in x and key(x) == key(r)]
        vals.append(f"{m[0]['fp8attn']:9.0f}" if m else f"{'-':>9s}")
    name = f"{r['kind']} {r['B']}x{r['H']}/{r['Hkv']} {r['Sq']}x{r['Sk']} d{r['D']}{' c' if r['causal'] else ''}"
    fl, c8 = r.get("sdpa_flash"), r.get("cudnn_fp8")
    print(f"{name:44s} {fl or 0:7.0f} {c8 or 0:7.0f} " + " ".join(vals))
EOF
[ -n "${KEEP_ALL:-}" ] || rm -f "$OUTDIR"/*/build.rc "$OUTDIR"/*/bench.md "$OUTDIR"/*/bench.png
exit $rc
