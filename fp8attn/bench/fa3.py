"""FlashAttention-3 FP8 as a peer of the GPU benchmark, from a ``fa3_peer`` binary (``--fa3-peer PATH``).

``fa3_peer`` (``lab/standalone/fa3_peer/``: FA3's ``hopper/`` kernels built with no torch, nothing of FA3
committed) times FA3's FP8 forward on the benchmark's prefill shapes and FA3's paged FP8-KV decode as vLLM's
FLASH_ATTN backend calls it, each checked against a CPU reference first. The benchmark runs it once per run as
a subprocess, parses its lines here and merges them into its rows by shape: ``fa3_fp8`` (TFLOP/s, or GB/s of
K+V read for decode, as fp8attn's figure), ``fa3_fp8_ms`` and the check's numbers. A row whose check failed
keeps no figure (``fa3_fp8`` None, ``fa3_fp8_note`` says why).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

TIMEOUT_S = 600  # the binary's whole run (about 10 s of GPU time, plus its CPU references)
# fa3_peer's decode rows are H 32 / Hkv 8 / D 128 (vLLM's block size 16); its decode lines name B, context, q_len.
DECODE_HEADS = (32, 8, 128)

_NUM = r"(\d+(?:\.\d+)?)"
_ERR = r"(\d+(?:\.\d+)?|inf|nan)"  # a NaN output makes the decode check's error inf
# fa3 fp8 BxH[/Hkv]xSxD[ causal]  T ms  F TFLOP/s  max|err| E (max|ref| R)  NaN outputs N[  CHECK FAILED]
_PREFILL = re.compile(rf"fa3 fp8 (\d+)x(\d+)(?:/(\d+))?x(\d+)x(\d+)( causal)?\s+{_NUM} ms\s+{_NUM} TFLOP/s\s+"
                      rf"max\|err\| {_ERR} \(max\|ref\| {_NUM}\)\s+NaN outputs (\d+)(\s+CHECK FAILED)?")
# fa3 decode B ctx q_len  T us  G GB/s  (+prepare per call: T us  G GB/s)  splits S (per batch ..) ...
#   max|err| E / E (max|ref| R)  NaN outputs N / N[  CHECK FAILED]
_DECODE = re.compile(rf"fa3 decode (\d+) (\d+) (\d+)\s+{_NUM} us\s+{_NUM} GB/s\s+\(\+prepare per call: {_NUM} us\s+"
                     rf"{_NUM} GB/s\)\s+splits (\d+) .*max\|err\| {_ERR} / {_ERR} \(max\|ref\| {_NUM}\)\s+"
                     rf"NaN outputs (\d+) / (\d+)(\s+CHECK FAILED)?")


@dataclass
class Fa3Results:
    """fa3_peer's rows: row fields by prefill key (B, H, Hkv, S, D, causal) and decode key (B, H, Hkv, context,
    D, q_len); ``other``: its lines that start with ``fa3`` and are neither (rows it skipped)."""

    prefill: dict[tuple, dict] = field(default_factory=dict)
    decode: dict[tuple, dict] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)


def _checked(fields: dict, figure: float, failed: bool, line: str) -> dict:
    """The row fields with the figure, or without it (and a note) when fa3_peer's check failed."""
    if failed:
        return dict(fields, fa3_fp8=None, fa3_fp8_note=f"fa3_peer check failed: {line}")
    return dict(fields, fa3_fp8=figure)


def parse(text: str) -> Fa3Results:
    """fa3_peer's output -> its rows (lines of other forms, e.g. power windows, are ignored)."""
    res = Fa3Results()
    for raw in text.splitlines():
        line = raw.strip()
        if m := _PREFILL.fullmatch(line):
            b, h, hkv, s, d = (int(g) if g else None for g in m.groups()[:5])
            fields = dict(fa3_fp8_ms=float(m[7]), fa3_fp8_max_err=float(m[9]), fa3_fp8_max_ref=float(m[10]),
                          fa3_fp8_nan=int(m[11]))
            res.prefill[(b, h, hkv or h, s, d, bool(m[6]))] = _checked(fields, float(m[8]), bool(m[12]), line)
        elif m := _DECODE.fullmatch(line):
            b, ctx, qlen = int(m[1]), int(m[2]), int(m[3])
            fields = dict(fa3_fp8_ms=float(m[4]) / 1e3, fa3_fp8_prepare_ms=float(m[6]) / 1e3, fa3_fp8_splits=int(m[8]),
                          fa3_fp8_max_err=max(float(m[9]), float(m[10])), fa3_fp8_max_ref=float(m[11]),
                          fa3_fp8_nan=int(m[12]) + int(m[13]))
            h, hkv, d = DECODE_HEADS
            res.decode[(b, h, hkv, ctx, d, qlen)] = _checked(fields, float(m[5]), bool(m[14]), line)
        elif line.startswith("fa3 "):
            res.other.append(line)
    return res


def merge(rows: list[dict], res: Fa3Results) -> None:
    """Adds FA3's fields to the benchmark's prefill and decode rows of the same shape (the others stay without)."""
    for r in rows:
        if "error" in r:
            continue
        if r["kind"] == "prefill":
            got = res.prefill.get((r["B"], r["H"], r["Hkv"], r["Sq"], r["D"], r["causal"]))
        elif r["kind"] == "decode":
            got = res.decode.get((r["B"], r["H"], r["Hkv"], r["Sk"], r["D"], r["Sq"]))
        else:
            got = None
        if got is not None:
            r.update(got)


def command(path: str, only: str) -> list[str]:
    """fa3_peer's command line for the benchmark's --only (prefill, decode or all)."""
    return [path] + {"prefill": ["--prefill-only"], "decode": ["--decode-only"], "all": []}[only]


def run(path: str, only: str) -> tuple[Fa3Results, dict]:
    """Runs fa3_peer once; returns its rows and what the JSON keeps of the run (command, exit code, output).

    A failed or timed-out run keeps the rows it printed before; its exit code (None: timed out) says so."""
    cmd = command(path, only)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"timed out after {TIMEOUT_S} s"
    log = dict(command=cmd, rc=rc, output=out.splitlines())
    if rc != 0:
        log["stderr"] = err.splitlines()[-20:]
    return parse(out), log
