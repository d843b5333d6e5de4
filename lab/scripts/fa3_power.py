"""fa3_peer's output and an nvidia-smi log of the same run -> one JSON record per shape.

    python3 lab/scripts/fa3_power.py FA3_OUTPUT SMI_CSV [--json OUT.json]

FA3_OUTPUT holds the lines of ``lab/standalone/fa3_peer/fa3_peer --seconds S`` (the timed TFLOP/s,
then the epoch-ms window of S seconds back to back); SMI_CSV was written during that run by
``nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks_event_reasons.sw_power_cap
--format=csv,noheader,nounits -lms 100``. Per shape: TFLOP/s (timed as ``python -m fp8attn.bench`` times),
sustained TFLOP/s, mean power and SM clock over the window (its first 300 ms left out), cycles and
joules per call, and how many samples had the power cap active -- the columns of
``lab/scripts/power_clock.py``, for a kernel that cannot be called from Python here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re

LINE = re.compile(r"fa3 fp8 (?P<shape>\d+x\d+(?:/\d+)?x\d+x\d+)(?P<causal> causal)?\s+(?P<ms>[\d.]+) ms"
                  r"\s+(?P<tflops>\d+) TFLOP/s"
                  r"\s+max\|err\| (?P<err>[\d.]+).*?NaN outputs (?P<nan>\d+)\n"
                  r"  power window (?P<t0>\d+) (?P<t1>\d+)\s+(?P<per_call>[\d.]+) ms per call\s+(?P<sus>\d+) TFLOP/s")


def epoch_ms(stamp: str) -> float:
    t = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() * 1e3


def records(fa3_text: str, smi_rows: list[list[str]]) -> list[dict]:
    """One record per shape whose sustained window the log covers."""
    out = []
    for m in LINE.finditer(fa3_text):
        t0, t1 = int(m["t0"]), int(m["t1"])
        win = [r for r in smi_rows if t0 + 300 <= epoch_ms(r[0]) <= t1]
        if not win:
            continue
        watts = sum(float(r[1]) for r in win) / len(win)
        mhz = sum(float(r[2]) for r in win) / len(win)
        per_call = float(m["per_call"])
        b, heads, s, d = m["shape"].split("x")
        h, _, hk = heads.partition("/")
        out.append({"b": int(b), "h": int(h), "h_kv": int(hk or h), "s": int(s), "d": int(d),
                    "causal": bool(m["causal"]), "tflops": int(m["tflops"]),
                    "max_abs_err_sampled_rows": float(m["err"]), "nan_outputs": int(m["nan"]),
                    "sustained_tflops": int(m["sus"]), "sustained_ms_per_call": per_call,
                    "power_w": round(watts, 1), "sm_clock_mhz": round(mhz),
                    "mcycles_per_call": round(mhz * per_call / 1e3, 3),
                    "joules_per_call": round(watts * per_call / 1e3, 3),
                    "power_cap_samples": f"{sum(r[3].strip() == 'Active' for r in win)}/{len(win)}"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fa3_output")
    ap.add_argument("smi_csv")
    ap.add_argument("--json", help="write the records here as well")
    a = ap.parse_args()
    with open(a.smi_csv) as f:
        rows = [[c.strip() for c in line.split(",")] for line in f if line.count(",") >= 3]
    with open(a.fa3_output) as f:
        recs = records(f.read(), rows)
    for r in recs:
        heads = f"{r['h']}/{r['h_kv']}" if r["h_kv"] != r["h"] else f"{r['h']}"
        shape = f"{r['b']}x{heads}x{r['s']}x{r['d']}{' causal' if r['causal'] else ''}"
        print(f"{shape:21s} {r['tflops']:5d} TFLOP/s timed, "
              f"{r['sustained_tflops']:5d} sustained, {r['power_w']} W, {r['sm_clock_mhz']} MHz, "
              f"{r['mcycles_per_call']} Mcycles, {r['joules_per_call']} J per call, power cap {r['power_cap_samples']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
