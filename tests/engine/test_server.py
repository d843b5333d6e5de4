"""vLLM's OpenAI-compatible server with FP8ATTN on the embedded model, as a user starts it on a CPU machine:

    FP8ATTN_VLLM_CPU=1 python -m vllm.entrypoints.openai.api_server --model DIR --host 127.0.0.1 --port PORT \\
        --kv-cache-dtype fp8 --attention-backend CUSTOM --max-model-len 512 --block-size 32

(vllm-cpu's ``vllm`` console script cannot start: it looks up its own distribution under the name "vllm"; the
module entry point is the same server). Completions, chat and streaming requests, then the server is stopped
by its PID. The server keeps vLLM's default compilation (torch.compile of the model on the CPU platform).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from engines import GREEDY_TOKENS, Server, check_greedy, fp8attn_processes, post

PROMPT = "def main("


@pytest.fixture(scope="module")
def server(serving_dir, tmp_path_factory):
    s = Server(serving_dir, tmp_path_factory.mktemp("server"))
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def completion(server: Server, **kw) -> dict:
    body = {"model": server.model, "prompt": PROMPT, "max_tokens": GREEDY_TOKENS, "temperature": 0.0, **kw}
    with post(f"{server.url}/v1/completions", body) as r:
        return json.load(r)


def test_completions_are_greedy_fp8attn(server, reference):
    out = completion(server)
    text = out["choices"][0]["text"]
    assert out["usage"]["completion_tokens"] == GREEDY_TOKENS
    ids = list(text.encode())  # the byte tokenizer: token ids are the UTF-8 bytes
    check_greedy(reference, [PROMPT], [ids], [reference.greedy(PROMPT)], "server vs transformers")


def test_chat_completions(server):
    body = {"model": server.model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16,
            "temperature": 0.0}
    with post(f"{server.url}/v1/chat/completions", body) as r:
        out = json.load(r)
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"]) > 0, out
    assert out["usage"]["completion_tokens"] == 16


def test_streaming_gives_the_same_text(server):
    whole = completion(server, max_tokens=24)["choices"][0]["text"]
    pieces, done = [], False
    with post(f"{server.url}/v1/completions", {"model": server.model, "prompt": PROMPT, "max_tokens": 24,
                                               "temperature": 0.0, "stream": True}) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            pieces.append(json.loads(line[len("data: "):])["choices"][0]["text"])
    assert done and len(pieces) > 1
    assert "".join(pieces) == whole


def test_api_server_process_loads_no_fp8attn_extension(server):
    """The plugin runs in the API server process too; it must not load fp8attn's compiled extension there."""
    maps = Path(f"/proc/{server.proc.pid}/maps")
    if not maps.exists():
        pytest.skip("no /proc on this system")
    assert "fp8attn/_C" not in maps.read_text()


def test_fp8attn_served_and_stops_by_pid(server):
    completion(server, max_tokens=4)
    assert "Using FP8ATTN on vLLM's CPU platform (FP8ATTN_VLLM_CPU=1)" in server.log()
    assert fp8attn_processes(server.log()) == ["Worker"]
    server.stop()
    assert server.proc.poll() is not None
    log = server.log()
    assert "terminate called" not in log, log[-3000:]


def test_vllm_console_script_of_vllm_cpu_does_not_start():
    """Why the docs start the server with `python -m vllm.entrypoints.openai.api_server`."""
    script = Path(sys.executable).with_name("vllm")
    if not script.exists():
        pytest.skip("no vllm console script in this environment")
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "PackageNotFoundError" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
