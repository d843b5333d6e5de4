"""Power draw and SM clock while fp8attn and cuDNN's FP8 SDPA each run one prefill shape back to back.

    python3 lab/scripts/power_clock.py [--d 128] [--causal] [--seconds 4]

Inputs, scales and the cuDNN graph are those of ``python -m fp8attn.bench``. Each kernel runs for
``--seconds`` after a warm-up while ``nvidia-smi`` samples power, clock and the clock-event reasons every
100 ms; printed per kernel: TFLOP/s, the mean power and SM clock of the samples, and the cycles per call
that clock implies. Both kernels near the board's power limit means their speed is set by energy per call,
not by cycles alone.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import time
from collections.abc import Callable

import torch
from prefill_pair import add_shape_args, prefill_pair

FIELDS = ("power.draw,power.limit,clocks.sm,temperature.gpu,clocks_event_reasons.sw_power_cap,"
          "clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown")
BASIC = "power.draw,power.limit,clocks.sm,temperature.gpu"


def sampled(run: Callable[[], object], seconds: float, fields: str) -> tuple[int, float, list[list[str]]]:
    """Calls ``run`` for ``seconds`` under an nvidia-smi sampler: (calls, elapsed s, sample rows)."""
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            run()
        n += 10
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    smi.terminate()
    out = smi.communicate()[0]
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    return n, dt, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_args(ap)
    ap.add_argument("--seconds", type=float, default=4.0)
    a = ap.parse_args()
    ours, theirs, _ = prefill_pair(a)
    flops = 4.0 * a.b * a.h * a.s * a.s * a.d / (2 if a.causal else 1)
    fields = FIELDS
    probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        fields = BASIC
    print(f"B={a.b} H={a.h} S={a.s} D={a.d} causal={a.causal}; nvidia-smi fields: {fields}")
    for name, run in (("fp8attn", ours), ("cuDNN FP8", theirs), ("fp8attn again", ours)):
        sampled(run, 1.0, fields)  # warm-up to a steady temperature and clock
        n, dt, rows = sampled(run, a.seconds, fields)
        good = [r for r in rows if len(r) >= 3 and r[0].replace(".", "").isdigit()]
        good = good[2:] or good  # the first samples may straddle the start
        power = sum(float(r[0]) for r in good) / max(len(good), 1)
        clock = sum(float(r[2]) for r in good) / max(len(good), 1)
        per_call = dt / n
        print(f"{name:14s} {flops / per_call / 1e12:7.1f} TFLOP/s  {per_call * 1e3:7.3f} ms/call  "
              f"power {power:6.1f} W (limit {good[0][1] if good else '?'})  SM clock {clock:6.0f} MHz  "
              f"{clock * per_call:7.3f} Mcycles/call  samples {len(good)}")
        if fields == FIELDS:
            reasons = dict(collections.Counter(",".join(r[4:]) for r in good))
            print(f"{'':14s} clock-event reasons (sw_power_cap, hw_slowdown, sw_thermal) -> samples: {reasons}; "
                  f"temperature {good[-1][3] if good else '?'} C")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
