"""The benchmark's FlashAttention-3 FP8 peer on the CPU: fa3_peer's recorded output (tests/data/fa3_peer_h100.txt,
one H100 run of lab/standalone/fa3_peer at flash-attention 0251105a) parsed, merged into the benchmark's rows by
shape and shown in its table; the binary's runner and the --fa3-peer check on executables standing in for it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from fp8attn.bench import fa3, gpu, main

RECORDED = (Path(__file__).parent / "data" / "fa3_peer_h100.txt").read_text()


def bench_rows() -> list[dict]:
    """Rows as gpu.run collects them (the fields merge and table read), one per shape of the benchmark."""
    rows = [dict(kind="prefill", B=b, H=h, Hkv=hkv, Sq=s, Sk=s, D=d, causal=c, fp8attn=500.0)
            for b, h, hkv, s, d, c in gpu.PREFILL]
    rows += [dict(kind="varlen paged" if page else "varlen", B=len(lens), H=h, Hkv=hkv, Sq=max(lens), Sk=max(lens),
                  D=d, causal=True, fp8attn=400.0) for h, hkv, d, lens, page in gpu.VARLEN]
    rows += [dict(kind="decode", B=b, H=h, Hkv=hkv, Sq=q, Sk=ctx, D=d, causal=True, fp8attn=2000.0, fp8attn_ms=0.05)
             for b, ctx, h, hkv, d, q in gpu.DECODE]
    return rows + [dict(kind="prefill", cfg="(1, 32, 32, 8192, 128, False)", error="RuntimeError('x')")]


def test_parse_recorded_output_covers_every_benchmark_shape():
    res = fa3.parse(RECORDED)
    assert sorted(res.prefill) == sorted((b, h, hkv, s, d, c) for b, h, hkv, s, d, c in gpu.PREFILL)
    assert sorted(res.decode) == sorted((b, h, hkv, ctx, d, q) for b, ctx, h, hkv, d, q in gpu.DECODE)
    assert res.other == []
    d256 = res.prefill[(1, 32, 32, 8192, 256, False)]
    assert d256 == dict(fa3_fp8=1108.0, fa3_fp8_ms=1.984, fa3_fp8_max_err=0.0017, fa3_fp8_max_ref=0.077, fa3_fp8_nan=0)
    assert res.prefill[(4, 32, 8, 2048, 128, True)]["fa3_fp8"] == 661.0  # GQA: BxH/HkvxSxD
    dec = res.decode[(1, 32, 8, 32768, 128, 1)]
    assert dec == pytest.approx(dict(fa3_fp8=1793.0, fa3_fp8_ms=0.03744, fa3_fp8_prepare_ms=0.04074, fa3_fp8_splits=15,
                                     fa3_fp8_max_err=0.0007, fa3_fp8_max_ref=0.029, fa3_fp8_nan=0))
    assert res.decode[(8, 32, 8, 8192, 128, 4)]["fa3_fp8_ms"] == pytest.approx(0.06743)


def test_parse_failed_checks_skipped_rows_and_power_windows():
    lines = RECORDED.splitlines()
    prefill, decode = lines[0], lines[8]
    skipped = ("fa3 decode 4 1000 1  skipped: context must be a multiple of 16 and >= q_len")
    power = "  power window 1796101936235 1796101939309  1.256 ms per call  876 TFLOP/s sustained"
    res = fa3.parse("\n".join([prefill + "  CHECK FAILED", power, decode + "  CHECK FAILED", skipped, "", "noise"]))
    (p,), (d,) = res.prefill.values(), res.decode.values()
    for row, line in ((p, prefill), (d, decode)):
        assert row["fa3_fp8"] is None and line in row["fa3_fp8_note"]
        assert row["fa3_fp8_ms"] > 0  # the time stays on record; only the figure is withheld
    assert res.other == [skipped]
    poisoned = decode.replace("max|err| 0.0007 / 0.0007", "max|err| inf / 0.0007") + "  CHECK FAILED"
    (row,) = fa3.parse(poisoned).decode.values()
    assert row["fa3_fp8"] is None and row["fa3_fp8_max_err"] == float("inf")
    assert fa3.parse(prefill.replace("TFLOP/s", "TFLOPS")).other == [prefill.replace("TFLOP/s", "TFLOPS")]


def test_merge_by_shape_and_table_columns():
    rows = bench_rows()
    fa3.merge(rows, fa3.parse(RECORDED))
    by_kind = {k: [r for r in rows if r["kind"] == k and "error" not in r] for k in ("prefill", "varlen", "decode")}
    assert all(isinstance(r["fa3_fp8"], float) for r in by_kind["prefill"] + by_kind["decode"])
    assert not any("fa3_fp8" in r for r in rows if r["kind"].startswith("varlen") or "error" in r)
    assert by_kind["prefill"][4]["fa3_fp8"] == 1108.0 and by_kind["decode"][0]["fa3_fp8_ms"] == pytest.approx(0.03744)

    md = gpu.table([r for r in rows if "error" not in r])
    pre_head, dec_head = (ln for ln in md.splitlines() if ln.startswith(("| kind", "| decode B")))
    pre_rows = [ln for ln in md.splitlines() if ln.startswith(("| prefill", "| varlen"))]
    dec_rows = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]
    col = pre_head.split("|").index(" FA3 FP8 ")
    assert [ln.split("|")[col].strip() for ln in pre_rows] == ["881", "840", "639", "621", "1108", "308", "878", "661",
                                                                "-", "-"]
    cols = dec_head.split("|")
    got = [(ln.split("|")[cols.index(" FA3 FP8 (paged) ")].strip(), ln.split("|")[cols.index(" FA3 ms ")].strip())
           for ln in dec_rows]
    assert got[0] == ("1793", "0.0374") and len(got) == len(gpu.DECODE)

    bare = bench_rows()[:1]
    assert gpu.table(bare).splitlines()[2].split("|")[col].strip() == "-"


def fake_binary(tmp_path: Path, body: str) -> str:
    """An executable standing in for fa3_peer: records its arguments in tmp_path/args, then runs `body`."""
    path = tmp_path / "fa3_peer"
    (tmp_path / "out.txt").write_text(RECORDED)
    path.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("only, flag", [("all", ""), ("prefill", "--prefill-only"), ("decode", "--decode-only")])
def test_run_passes_only_and_parses(tmp_path, only, flag):
    path = fake_binary(tmp_path, f'cat "{tmp_path}/out.txt"')
    res, log = fa3.run(path, only)
    assert (tmp_path / "args").read_text().strip() == flag
    assert log["rc"] == 0 and log["command"] == [path] + ([flag] if flag else []) and "stderr" not in log
    assert log["output"] == RECORDED.splitlines() and len(res.prefill) == 8 and len(res.decode) == 8


def test_run_failure_keeps_rows_printed_and_the_error(tmp_path):
    path = fake_binary(tmp_path, f'head -3 "{tmp_path}/out.txt"; echo "CUDA error: out of memory" >&2; exit 1')
    res, log = fa3.run(path, "all")
    assert log["rc"] == 1 and log["stderr"] == ["CUDA error: out of memory"]
    assert len(res.prefill) == 3 and not res.decode


def test_cli_rejects_a_missing_binary(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--fa3-peer", str(tmp_path / "nope")])
    assert e.value.code == 2 and "--fa3-peer" in capsys.readouterr().err
