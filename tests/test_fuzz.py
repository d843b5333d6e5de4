"""A fuzzer of fp8attn.forward: valid dense, varlen and paged calls, one argument mutated at a time.

Every case must either raise ValueError / TypeError whose message names the mutated argument, or
return what the fp64 reference returns (tests/fuzz_worker.py compares at the project's FP8
tolerance, NaN where and only where the reference has it); never crash, hang or raise anything else.
Cases run in a persistent worker process (tests/fuzz_worker.py), restarted after a crash or a hang.

CI runs a fixed budget with a fixed seed; FP8ATTN_FUZZ_EXAMPLES sets another budget. A campaign that
records its counts:

    python tests/test_fuzz.py --examples 2000 --json docs/fuzz-cpu.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
CASE_TIMEOUT_S = 60.0
EXAMPLES = int(os.environ.get("FP8ATTN_FUZZ_EXAMPLES", "1000"))

TENSORS = {"dense": ["q", "k", "v", "out", "q_descale", "k_descale", "v_descale", "p_scale", "sinks"],
           "varlen": ["q", "k", "v", "out", "q_descale", "k_descale", "v_descale", "p_scale", "sinks",
                      "cu_seqlens_q", "cu_seqlens_k"],
           "paged": ["q", "k", "v", "out", "q_descale", "k_descale", "v_descale", "p_scale", "sinks",
                     "cu_seqlens_q", "seqused_k", "block_table"]}
SCALARS = ["softmax_scale", "softcap", "window_size", "kv_tile", "max_seqlen_q", "max_seqlen_k", "causal",
           "return_softmax_lse", "out_dtype"]
TENSOR_CLASSES = ["dtype", "rank", "shape", "stride", "device", "value", "type"]
# The empty class: one size 0 wherever it occurs (fuzz_worker.empty), with the argument a refusal names.
EMPTY = {"dense": {"B": "q", "Sq": "q", "Sk": "k", "H": "q", "Hkv": "k", "D": "q"},
         "varlen": {"B": "q", "T": "q", "Tk": "k", "H": "q", "Hkv": "k", "D": "q"},
         "paged": {"B": "q", "T": "q", "H": "q", "Hkv": "k", "D": "q", "blocks": "k", "block_size": "k",
                   "pages": "block_table"}}


class Worker:
    """The persistent worker process: one JSON case in, one JSON result out."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.last: dict | None = None
        self.after_answer: list[dict] = []  # deaths of the worker after it had answered (the case before)

    def _start(self) -> None:
        # the worker imports the suite's helpers (tests/) and fp8attn as pytest does (from the checkout first)
        path = os.pathsep.join([str(HERE), str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fuzz_worker.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                     cwd=HERE.parent)

    def run(self, case: dict) -> dict:
        if self.proc is not None and self.proc.poll() is not None:  # died after its last answer
            self.after_answer.append({"case": self.last, "returncode": self.proc.returncode})
            self.proc = None
        if self.proc is None:
            self._start()
        self.last = case
        try:
            self.proc.stdin.write(json.dumps(case) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # judged below: no answer comes
        ready, _, _ = select.select([self.proc.stdout], [], [], CASE_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        try:  # no answer: it died (crash) or is still running after the timeout (hang)
            rc, hung = self.proc.wait(timeout=5), False
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc, hung = self.proc.wait(), True
        self.proc = None
        self.restarts += 1
        return {"outcome": "hang" if hung else "crash", "returncode": rc}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@st.composite
def cases(draw) -> dict:
    layout = draw(st.sampled_from(["dense", "varlen", "paged"]))
    fp8_out = draw(st.booleans())
    tensors = TENSORS[layout] + (["out_scale"] if fp8_out else [])
    mutations = ([(c, a) for c in TENSOR_CLASSES for a in tensors] + [("scalar", a) for a in SCALARS]
                 + [("alias", "out")] * 4 + [("empty", d) for d in EMPTY[layout]])
    cls, arg = draw(st.sampled_from(mutations))
    mutation = {"class": cls, "arg": arg, "pick": draw(st.integers(0, 1000))}
    if cls == "empty":
        mutation.update(dim=arg, arg=EMPTY[layout][arg])
    return {"layout": layout, "seed": draw(st.integers(0, 2**16)), "fp8": draw(st.sampled_from(["e4m3fn",
                                                                                                 "e4m3fnuz"])),
            "q": draw(st.sampled_from(["fp8", "bfloat16", "float16"])), "fp8_out": fp8_out, "mutation": mutation}


def verdict(case: dict, res: dict) -> str:
    """'refused' (a named ValueError / TypeError), 'matched' (the reference's result), or what went wrong."""
    if res["outcome"] in ("hang", "crash", "harness error"):
        return res["outcome"]
    if res["outcome"] == "ok":
        return "matched" if res["match"] else "silent garbage"
    if res["type"] not in ("ValueError", "TypeError"):
        return f"{res['type']} (not ValueError / TypeError)"
    arg = case["mutation"]["arg"]
    return "refused" if re.search(rf"(?<![\w]){re.escape(arg)}(?![\w])", res["message"]) else "unnamed error"


class Tally:
    """Counts per mutation class and outcome, and the failures (for the JSON record and the assertion)."""

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.failures: list[dict] = []

    def add(self, case: dict, res: dict) -> str:
        v = verdict(case, res)
        self.counts[case["mutation"]["class"]][v] += 1
        if v not in ("refused", "matched"):
            self.failures.append({"case": case, "result": res, "verdict": v})
        return v

    def record(self, examples: int, seconds: float, restarts: int) -> dict:
        return {"examples": examples, "seed": "hypothesis derandomized", "seconds": round(seconds, 1),
                "worker_restarts": restarts,
                "per_class": {c: dict(sorted(n.items())) for c, n in sorted(self.counts.items())},
                "outcomes": dict(sorted(sum(self.counts.values(), collections.Counter()).items())),
                "failures": self.failures[:50]}


def campaign(examples: int) -> tuple[Tally, Worker, float]:
    tally, worker = Tally(), Worker()
    start = time.monotonic()

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases())
    def one(case):
        seen = len(worker.after_answer)
        tally.add(case, worker.run(case))
        for death in worker.after_answer[seen:]:
            tally.add(death["case"], {"outcome": "crash", "returncode": death["returncode"], "after_answer": True})

    try:
        one()
    finally:
        worker.close()
    return tally, worker, time.monotonic() - start


def test_fuzz_forward():
    tally, worker, seconds = campaign(EXAMPLES)
    print(json.dumps(tally.record(EXAMPLES, seconds, worker.restarts)["outcomes"]))
    assert not tally.failures, json.dumps(tally.failures[:5], indent=1)


def markdown(record: dict, json_path: str | None, md_path: str) -> str:
    """The campaign's counts as a table: cases per mutation class and outcome."""
    verdicts = sorted(record["outcomes"])
    lines = ["# Fuzz campaign of fp8attn.forward (CPU)\n",
             f"Written by `python tests/test_fuzz.py --examples {record['examples']}"
             + (f" --json {json_path}" if json_path else "") + f" --md {md_path}` on "
             f"{record['date']}, commit {record['commit']}, torch {record['torch']}: {record['examples']} cases in "
             f"{record['seconds']:.0f} s, {record['worker_restarts']} worker restarts. Each case is a valid dense, "
             "varlen or paged call with one argument mutated; *refused* means a ValueError / TypeError naming "
             "that argument, *matched* a result equal to the fp64 reference's (NaN where, and only where, it has "
             "NaN). Any other outcome fails the test.\n",
             "| mutation | " + " | ".join(verdicts) + " | cases |", "|---|" + "---:|" * (len(verdicts) + 1)]
    for cls, n in record["per_class"].items():
        lines.append(f"| {cls} | " + " | ".join(str(n.get(v, 0)) for v in verdicts) + f" | {sum(n.values())} |")
    total = record["outcomes"]
    lines.append("| **all** | " + " | ".join(f"**{total[v]}**" for v in verdicts) + f" | **{sum(total.values())}** |")
    return "\n".join(lines) + "\n"


def _commit() -> str | None:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return out.stdout.strip() or None


def _torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True)
    return out.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=EXAMPLES)
    ap.add_argument("--json", default=None, help="write the counts (per class and outcome) and failures here")
    ap.add_argument("--md", default=None, help="write the counts as a markdown table here")
    args = ap.parse_args()
    tally, worker, seconds = campaign(args.examples)
    record = tally.record(args.examples, seconds, worker.restarts)
    record.update(date=time.strftime("%Y-%m-%d"), commit=_commit(), torch=_torch_version())
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    if args.md:
        Path(args.md).write_text(markdown(record, args.json, args.md))
    print(json.dumps(record["outcomes"]), f"{seconds:.0f} s")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
