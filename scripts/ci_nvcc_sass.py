#!/usr/bin/env python3
"""The SASS / register equivalence check of scripts/ci_nvcc_check.sh (no GPU needed).

For every kernel of every compiled NVIDIA instance and arch it reads, from what the compile-check
already produced (the object file and its `ptxas -v` log):
  * registers and spill bytes (ptxas -v);
  * the opcode histogram of the kernel's main loop in its SASS (`cuobjdump -sass`): the innermost
    natural loop of the control-flow graph (dominator back edges) that holds matrix instructions
    (HMMA / HGMMA / QGMMA / IMMA), the one with the most of them; kernels without any take their
    largest innermost loop (the whole function when it has no loop). Opcode class = the mnemonic
    without its modifiers (FMNMX.NAN -> FMNMX).
and compares them with the committed baseline (scripts/ci_nvcc_baseline.json): a kernel fails when
it uses more registers or spills more than its baseline, or when an opcode class of its main loop
moved by more than 1 % of its baseline count (at least one instruction is always allowed). Keys:
instance / arch / kernel role (`role_of`), so template renames do not break the comparison.

  ci_nvcc_sass.py check  OBJ_DIR BASELINE   # compare (prints per-kernel rows; exit 1 on a failure)
  ci_nvcc_sass.py write  OBJ_DIR BASELINE   # record this build's kernels in the baseline (a filtered
                                            # build replaces the entries of the instance / archs it built)

OBJ_DIR holds NAME.o and NAME.log per instance (ci_nvcc_check.sh's work directory). The baseline
records the nvcc that made it: with another nvcc the code differs anyway, and the comparison is
reported but does not fail (FP8ATTN_SASS_STRICT=1 makes it fail).
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

MMA = {"HMMA", "HGMMA", "QGMMA", "IMMA", "IGMMA", "BGMMA", "QMMA", "OMMA"}
TOLERANCE = 0.01

_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)\s*([^;]*);")
_FUNC = re.compile(r"^\s*Function : (\S+)")
_ARCH = re.compile(r"^arch = (sm_\w+)")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines(), strict=True))


def role_of(demangled: str) -> str:
    """A kernel's stable label inside its instance."""
    if "fwd_combine_kernel" in demangled:
        return "combine"
    if "fwd_kernel_wgmma" in demangled:
        return "wgmma"
    m = re.search(r"FwdPolicyNvDecode(Wg)?<fp8attn::FwdProblem<[^>]*>, (\d+)", demangled)
    if m:
        return f"decode{'wg' if m.group(1) else ''}{8 * int(m.group(2))}"
    if "FwdPipelineNvF16" in demangled:
        return "f16"
    if "FwdPipeline<" in demangled:
        return "fp8"
    return re.sub(r"[^A-Za-z0-9_]+", "_", demangled)[:80]


def parse_sass(text):
    """{(arch, mangled): [(addr, opcode, full_opcode, operands, predicated)]}"""
    funcs, arch, cur = {}, None, None
    for line in text.splitlines():
        m = _ARCH.match(line)
        if m:
            arch = m.group(1)
            continue
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault((arch, m.group(1)), [])
            continue
        m = _INSN.match(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(3), m.group(3) + m.group(4), m.group(5), bool(m.group(2))))
    return funcs


def _target(operands):
    m = re.search(r"(0x[0-9a-f]+)\s*$", operands)
    return int(m.group(1), 16) if m else None


def main_loop(insns):
    """Indices of the instructions of the kernel's main loop (see the module docstring)."""
    n = len(insns)
    if n == 0:
        return []
    index = {a: i for i, (a, *_rest) in enumerate(insns)}
    leaders = {0}
    for i, (_a, op, _full, operands, _pred) in enumerate(insns):
        if op in ("BRA", "EXIT", "RET", "BRX", "JMX", "JMP", "KILL"):
            if i + 1 < n:
                leaders.add(i + 1)
            t = _target(operands) if op in ("BRA", "JMP") else None
            if t is not None and t in index:
                leaders.add(index[t])
    starts = sorted(leaders)
    block_of = [0] * n
    for b, s in enumerate(starts):
        e = starts[b + 1] if b + 1 < len(starts) else n
        for i in range(s, e):
            block_of[i] = b
    nb = len(starts)
    succ = [set() for _ in range(nb)]
    for b in range(nb):
        e = (starts[b + 1] if b + 1 < nb else n) - 1
        _a, op, full, operands, pred = insns[e]
        cond = pred or ".DIV" in full or "," in operands  # (BRA P, target: a predicate operand)
        if op in ("BRA", "JMP"):
            t = _target(operands)
            if t is not None and t in index:
                succ[b].add(block_of[index[t]])
            if cond and b + 1 < nb:
                succ[b].add(b + 1)
        elif op in ("EXIT", "RET", "KILL"):
            if pred and b + 1 < nb:
                succ[b].add(b + 1)
        elif op in ("BRX", "JMX"):
            pass
        elif b + 1 < nb:
            succ[b].add(b + 1)
    pred_of = [set() for _ in range(nb)]
    for b in range(nb):
        for c in succ[b]:
            pred_of[c].add(b)
    # dominators (bitsets), from block 0
    full_set = (1 << nb) - 1
    dom = [full_set] * nb
    dom[0] = 1
    changed = True
    while changed:
        changed = False
        for b in range(1, nb):
            ps = [dom[p] for p in pred_of[b]]
            d = full_set
            for x in ps:
                d &= x
            d = (d if ps else 0) | (1 << b)
            if d != dom[b]:
                dom[b], changed = d, True
    loops = {}  # header -> set of blocks
    for u in range(nb):
        for h in succ[u]:
            if dom[u] >> h & 1:
                body = loops.setdefault(h, {h})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(pred_of[x])
    if not loops:
        return list(range(n))
    blocks_insns = {}
    for i in range(n):
        blocks_insns.setdefault(block_of[i], []).append(i)

    def mma_count(body):
        return sum(insns[i][1] in MMA for b in body for i in blocks_insns.get(b, []))

    def size(body):
        return sum(len(blocks_insns.get(b, [])) for b in body)

    bodies = list(loops.values())
    cands = [L for L in bodies if mma_count(L) > 0] or bodies
    inner = [L for L in cands if not any(M is not L and M < L for M in cands)]
    best = max(inner, key=lambda L: (mma_count(L), size(L)))
    return sorted(i for b in best for i in blocks_insns.get(b, []))


def parse_ptxas(log_text):
    """{(arch, mangled): (registers, spill store bytes + spill load bytes)}"""
    res, cur, spill = {}, None, 0
    for line in log_text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\w+)'", line)
        if m:
            cur, spill = (m.group(2), m.group(1)), 0
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            spill = int(m.group(1)) + int(m.group(2))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            res[cur] = (int(m.group(1)), spill)
            cur = None
    return res


def measure(obj_dir, cuobjdump):
    data = {}
    for obj in sorted(glob.glob(os.path.join(obj_dir, "*.o"))):
        inst = os.path.basename(obj)[:-2]
        if not inst.startswith("fwd_") or "." in inst:  # instance files only (fwd_table.cpp.o is host code)
            continue
        sass = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, check=True).stdout
        funcs = parse_sass(sass)
        with open(os.path.join(obj_dir, inst + ".log")) as f:
            ptx = parse_ptxas(f.read())
        names = demangle(sorted({m for _a, m in funcs}))
        for (arch, mangled), insns in funcs.items():
            loop = main_loop(insns)
            hist = {}
            for i in loop:
                hist[insns[i][1]] = hist.get(insns[i][1], 0) + 1
            regs, spill = ptx.get((arch, mangled), (None, None))
            data[f"{inst}/{arch}/{role_of(names[mangled])}"] = {
                "regs": regs, "spill": spill, "insns": len(insns), "loop_insns": len(loop),
                "loop": dict(sorted(hist.items()))}
    return data


def compare(base, cur):
    """(failures, rows): a row per kernel."""
    fails, rows = [], []
    for key in sorted(set(base) | set(cur)):
        b, c = base.get(key), cur.get(key)
        if b is None or c is None:
            fails.append(f"{key}: {'new kernel (not in the baseline)' if b is None else 'missing (in the baseline)'}")
            continue
        bad = []
        if c["regs"] is not None and b["regs"] is not None and c["regs"] > b["regs"]:
            bad.append(f"registers {b['regs']} -> {c['regs']}")
        if (c["spill"] or 0) > (b["spill"] or 0):
            bad.append(f"spill bytes {b['spill']} -> {c['spill']}")
        moved = []
        for op in sorted(set(b["loop"]) | set(c["loop"])):
            nb, nc = b["loop"].get(op, 0), c["loop"].get(op, 0)
            if nb != nc:
                moved.append(f"{op} {nb}->{nc}")
                if abs(nc - nb) > max(1, int(TOLERANCE * nb)):
                    bad.append(f"{op} {nb} -> {nc}")
        rows.append(f"{'FAIL' if bad else 'ok  '} {key}: R{b['regs']}->{c['regs']} spill {b['spill']}->{c['spill']} "
                    f"loop {b['loop_insns']}->{c['loop_insns']} insns {b['insns']}->{c['insns']}"
                    + (f" [{', '.join(moved)}]" if moved else ""))
        if bad:
            fails.append(f"{key}: " + "; ".join(bad))
    return fails, rows


def main(argv):
    if len(argv) != 4 or argv[1] not in ("check", "write"):
        sys.exit(__doc__)
    mode, obj_dir, path = argv[1:]
    cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
    nvcc = os.environ.get("NVCC_VERSION", "")
    cur = measure(obj_dir, cuobjdump)
    if mode == "write":  # a filtered build rewrites its own kernels' entries and keeps the others
        kernels = {}
        if os.path.exists(path):
            with open(path) as f:
                old = json.load(f)
            if old.get("nvcc") == nvcc:
                kernels = old["kernels"]
        built = {k.rsplit("/", 1)[0] for k in cur}
        kernels = {k: v for k, v in kernels.items() if k.rsplit("/", 1)[0] not in built}
        kernels.update(cur)
        with open(path, "w") as f:
            json.dump({"nvcc": nvcc, "kernels": kernels}, f, indent=0, sort_keys=True)
            f.write("\n")
        print(f"sass: {len(cur)} kernels recorded in {path} ({len(kernels)} in all)")
        return 0
    with open(path) as f:
        base = json.load(f)
    # A filtered build (FP8ATTN_HEAD_DIMS / FP8ATTN_FP8_KINDS / NVCC_CHECK_ARCHS) compares what it built.
    built = {k.split("/")[0] for k in cur} | {k.split("/")[1] for k in cur}
    kernels = {k: v for k, v in base["kernels"].items() if k.split("/")[0] in built and k.split("/")[1] in built}
    fails, rows = compare(kernels, cur)
    print("\n".join(rows))
    if base.get("nvcc") != nvcc:
        print(f"sass: the baseline was made with nvcc {base.get('nvcc')!r}, this is {nvcc!r}: "
              f"{len(fails)} differences reported, not enforced")
        return 1 if fails and os.environ.get("FP8ATTN_SASS_STRICT") == "1" else 0
    if fails:
        print("\n".join(fails))
        print(f"FAILED: {len(fails)} kernels differ from the baseline (registers, spills or main-loop instruction mix)")
        return 1
    print(f"ok: {len(rows)} kernels keep their registers, spills and main-loop instruction mix (within 1 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
