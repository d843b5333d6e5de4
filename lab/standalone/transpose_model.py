"""Model of the wgmma producer's V transpose (csrc/kernels/fwd/pipeline_wgmma.h, Producer and
transpose_v: ldmatrix .trans, two byte permutes per register pair, stmatrix), lane by lane, against the
Vt layout the consumers' P.V reads (Vt[d][position] = V[key_of_pos(position)][d] in the 64B-swizzled
tile; Vraw in the K tile's swizzle, as TMA lands it): every Vt byte written once and right, and every
8-row matrix of the ldmatrix / stmatrix on 8 distinct 16-byte bank groups. For each head dim x KV tile
of the pipeline. Run: python3 transpose_model.py"""
import random


def key_of_pos(v):
    w = v & 31
    b = w & 3
    return 32 * (v >> 5) + 16 * (w >> 4) + 8 * (b >> 1) + 2 * ((w >> 2) & 3) + (b & 1)

def vt_offset(kD, d, col):  # SwizzledTile<64>::offset(rows=kD, row=d, col)
    return (col // 64) * kD * 64 + d * 64 + ((((col % 64) >> 4) ^ ((d & 7) >> 1)) << 4) + (col & 15)

def qk_offset(kD, rows, row, col):  # SwizzledTile<kSw>::offset, the K tile's (and Vraw's) layout
    sw = 128 if kD >= 128 else 64
    shift = 0 if sw == 128 else 1
    return (col // sw) * rows * sw + row * sw + ((((col % sw) >> 4) ^ ((row & 7) >> shift)) << 4) + (col & 15)

def check(kD, kBN):
    sw = 128 if kD >= 128 else 64
    bs = sw // 32
    def vraw_offset(key, chunk):
        return qk_offset(kD, kBN, key, 16 * chunk)
    V = [[random.randrange(256) for _ in range(kD)] for _ in range(kBN)]
    raw = bytearray(kBN * kD)
    for k in range(kBN):
        for c in range(kD // 16):
            for i in range(16):
                raw[vraw_offset(k, c) + i] = V[k][16 * c + i]
    vt = [None] * (kD * kBN)
    NG, NB = kBN // 16, kD // 32
    conflicts = 0
    for w in range(4):
        # per-lane constants
        ld_base, st_base, s0, s1 = [], [], [], []
        for L in range(32):
            m, r = L // 8, L % 8
            ld_base.append(vraw_offset(16 * w + 8 * (m & 1) + r, m >> 1))
            p = (0 if r < 4 else 1) if m % 2 == 0 else (1 if r < 4 else 0)
            d = 16 * (m >> 1) + 2 * r + p
            st_base.append(64 * d + ((w ^ ((d & 7) >> 1)) << 4))
            j = L // 4
            s0.append(0x6420 if j < 4 else 0x7531)
            s1.append(0x7531 if j < 4 else 0x6420)
        for i in range(NG // 4):
            for bp in range(NB):
                # ldmatrix.x4.trans
                addrs = [(ld_base[L] ^ (32 * (bp % bs))) + 64 * i * sw + kBN * sw * (bp // bs) for L in range(32)]
                assert all(addrs[8 * m + r] == vraw_offset(16 * w + 64 * i + 8 * (m & 1) + r, (m >> 1) + 2 * bp)
                           for m in range(4) for r in range(8)), "Vraw address"
                # bank check: each matrix = one wavefront if its 8 rows hit distinct 16B bank groups
                for m in range(4):
                    groups = {(addrs[8 * m + r] // 16) % 8 for r in range(8)}
                    conflicts += 8 - len(groups)
                mats = []
                for m in range(4):
                    mats.append([[raw[addrs[8 * m + r] + 2 * c] | (raw[addrs[8 * m + r] + 2 * c + 1] << 8)
                                  for c in range(8)] for r in range(8)])
                regs = [[0] * 4 for _ in range(32)]
                for t in range(32):
                    for m in range(4):
                        lo = mats[m][2 * (t % 4)][t // 4]
                        hi = mats[m][2 * (t % 4) + 1][t // 4]
                        regs[t][m] = lo | (hi << 16)
                def prmt(a, b, sel):
                    x = a | (b << 32)
                    return sum(((x >> (8 * ((sel >> (4 * n)) & 7))) & 0xff) << (8 * n) for n in range(4))
                out = [[prmt(regs[t][0], regs[t][1], s0[t]), prmt(regs[t][0], regs[t][1], s1[t]),
                        prmt(regs[t][2], regs[t][3], s0[t]), prmt(regs[t][2], regs[t][3], s1[t])] for t in range(32)]
                # stmatrix.x4 (non-trans): row r of matrix m <- word (m) of lanes 4r..4r+3, lane L gives row address
                saddr = [st_base[L] + i * kD * 64 + 2048 * bp for L in range(32)]
                for m in range(4):
                    groups = {(saddr[8 * m + r] // 16) % 8 for r in range(8)}
                    conflicts += 8 - len(groups)
                    for r in range(8):
                        for wd in range(4):
                            word = out[4 * r + wd][m]
                            for n in range(4):
                                a = saddr[8 * m + r] + 4 * wd + n
                                assert vt[a] is None, "written twice"
                                vt[a] = (word >> (8 * n)) & 0xff
    bad = 0
    for d in range(kD):
        for pos in range(kBN):
            if vt[vt_offset(kD, d, pos)] != V[key_of_pos(pos)][d]:
                bad += 1
    print(f"D {kD} kv {kBN}: mismatches {bad}, unwritten {vt.count(None)}, extra bank conflicts {conflicts}")
    return bad == 0 and vt.count(None) == 0 and conflicts == 0


if __name__ == "__main__":
    ok = all([check(kD, kBN) for kD, kBN in ((64, 64), (64, 128), (128, 64), (128, 128), (256, 64))])
    raise SystemExit(0 if ok else 1)
