"""What the engine tests share: the engines' settings, running engine_job.py, the OpenAI server, the log lines
that show FP8ATTN ran, the transformers reference, and the greedy comparison."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MODEL = ROOT / "models" / "stdlib-llama"

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# the engines' settings, shared by every test engine
PROMPTS = ["def main(", "import os\n", "class Foo:\n    def ", "for i in range(", "    return ", "# Copyright",
           "if __name__ == ", "from collections import "]
GREEDY_TOKENS = 48
WINDOW = 511  # prompt-logprob windows: a prompt and its one generated token fit max_model_len 512
BLOCK = 32  # vLLM's CPU_ATTN needs a multiple of 32
KV_BLOCKS = 24  # 768 tokens of KV cache: the mixed load preempts
MAX_BATCHED_TOKENS = 64  # a prompt longer than this is prefilled in chunks
ENGINE = dict(dtype="bfloat16", max_model_len=512, block_size=BLOCK, max_num_batched_tokens=MAX_BATCHED_TOKENS,
              max_num_seqs=16, disable_log_stats=False, seed=0, enable_prefix_caching=True)
FP8ATTN = {"FP8ATTN_VLLM_CPU": "1"}  # the opt-in for FP8ATTN on vLLM's CPU platform


def kv_cache_bytes(model_dir: Path, blocks: int = KV_BLOCKS, block: int = BLOCK, fp8: bool = True) -> int:
    cfg = json.loads((model_dir / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_token = 2 * cfg["num_key_value_heads"] * head_dim * (1 if fp8 else 2) * cfg["num_hidden_layers"]
    return blocks * block * per_token


def heldout_windows(n: int, length: int = WINDOW) -> list[list[int]]:
    data = (MODEL / "heldout.txt").read_bytes()
    return [list(data[i * length:(i + 1) * length]) for i in range(n)]


class EngineRun:
    """The results and the log of one engine_job.py run."""

    def __init__(self, results: dict, log: str, seconds: float):
        self.results, self.log, self.seconds = results, log, seconds

    def engine_log(self, name: str) -> str:
        m = re.search(rf"^=== engine {re.escape(name)} start$(.*?)^=== engine {re.escape(name)} end$", self.log,
                      re.S | re.M)
        assert m, f"no log section for engine {name}"
        return m.group(1)

    def __getitem__(self, name: str) -> dict:
        return self.results[name]


def run_engines(engines: list[dict], workdir: Path, timeout: float = 1500) -> EngineRun:
    """Run engine_job.py on these engine specs in a fresh interpreter; fails with the log's tail."""
    job, result = workdir / "job.json", workdir / "result.json"
    job.write_text(json.dumps({"engines": engines}))
    env = {k: v for k, v in os.environ.items() if k not in ("FP8ATTN_VLLM_CPU", "VLLM_CPU_KVCACHE_SPACE")}
    env["PYTHONUNBUFFERED"] = "1"  # one stream, in order: the job's markers and every engine process's log
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(HERE / "engine_job.py"), str(job), str(result)], cwd=workdir, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    log = proc.stdout
    (workdir / "engines.log").write_text(log)
    assert proc.returncode == 0, f"engine_job.py failed ({proc.returncode}); log tail:\n{log[-6000:]}"
    return EngineRun(json.loads(result.read_text()), log, seconds)


def quark_export(out: Path, *args: str) -> Path:
    """scripts/vllm/quark_export.py OUT ARGS... (amd-quark 0.13): OUT/<scheme>[-cpu]; returns out."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "vllm" / "quark_export.py"), str(out), *args],
                          cwd=out, env={**os.environ, "QUARK_DISABLE_COMPILE": "1"}, capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 300):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


class Server:
    def __init__(self, model: Path, workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = str(model)
        self.log_path = workdir / "server.log"
        self._log = open(self.log_path, "w")
        env = {**{k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}, **FP8ATTN,
               "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model, "--host", "127.0.0.1",
             "--port", str(self.port), "--kv-cache-dtype", "fp8", "--attention-backend", "CUSTOM", "--dtype",
             "bfloat16", "--max-model-len", "512", "--block-size", "32"],
            cwd=workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited ({self.proc.returncode}):\n{self.log()[-6000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(2)
        raise AssertionError(f"the server was not ready in {timeout} s:\n{self.log()[-6000:]}")

    def stop(self) -> int:
        """SIGTERM to the server's PID, then its exit status (SIGKILL after 120 s)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._log.close()
        return self.proc.returncode

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


FORWARD_LINE = re.compile(r"^\((?P<proc>[^)]*?) pid=\d+\).*FP8ATTN forward running \(fp8attn on cpu\)", re.M)


def fp8attn_processes(log: str) -> list[str]:
    """The vLLM processes (e.g. "Worker", "Worker_TP1") whose first FP8ATTN forward the log shows."""
    return sorted(m.group("proc") for m in FORWARD_LINE.finditer(log))


class Reference:
    """A model (default: the embedded one) in fp32 under transformers: greedy generations and next-token
    log-probabilities. Eager attention: transformers' SDPA path drops Gemma-2's attention logit softcap."""

    def __init__(self, model_dir: Path = MODEL):
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                                          attn_implementation="eager").eval()

    def greedy(self, prompt: str, n: int = GREEDY_TOKENS) -> list[int]:
        ids = self.torch.tensor([list(prompt.encode())])
        with self.torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=n, do_sample=False)
        return out[0, ids.shape[1]:].tolist()

    def logprobs(self, ids: list[int]):
        """log p(· | ids): [vocab]."""
        return self.all_logprobs(ids)[-1]

    def token_logprobs(self, ids: list[int]):
        """log p(ids[i] | ids[:i]) for i >= 1, as vLLM's prompt logprobs: [len(ids) - 1]."""
        return self.all_logprobs(ids)[:-1].gather(1, self.torch.tensor(ids[1:])[:, None])[:, 0]

    def all_logprobs(self, ids: list[int]):
        """log p(· | ids[:i + 1]) for every i: [len(ids), vocab]."""
        with self.torch.no_grad():
            return self.torch.log_softmax(self.model(self.torch.tensor([ids])).logits[0].float(), -1)


# nats: two next tokens whose fp32 log-probabilities are this close are a tie for a bf16 model. vLLM's own
# backend (bf16 activations, bf16 or FP8 KV cache) departs from transformers fp32 at gaps up to 0.1 on the
# embedded model.
NEAR_TIE = 0.25


def check_greedy(reference: Reference, prompts: list[str], got: list[list[int]], expected: list[list[int]],
                 what: str) -> int:
    """Greedy tokens equal, or equal until a step where the fp32 model finds the two tokens chosen nearly equally
    likely (within NEAR_TIE); returns how many sequences are equal throughout."""
    equal = 0
    for prompt, a, b in zip(prompts, got, expected, strict=True):
        assert len(a) == len(b) == GREEDY_TOKENS, (len(a), len(b))
        if a == b:
            equal += 1
            continue
        i = next(j for j in range(len(a)) if a[j] != b[j])
        lp = reference.logprobs(list(prompt.encode()) + a[:i])
        gap = abs(float(lp[a[i]] - lp[b[i]]))
        assert gap <= NEAR_TIE, (f"{what}: {prompt!r} diverges at token {i}: {a[i]} vs {b[i]}, whose fp32 "
                                 f"log-probabilities differ by {gap:.3f} nats (not a tie)")
    return equal
