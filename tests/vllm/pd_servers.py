"""Real vLLM OpenAI servers and kvtier-pd-proxy processes for the PD tests and bench.

Every process runs on loopback with the pinned venv's python (the one running this).
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import harness  # noqa: F401 - sets the engine environment (offline, 1 GiB KV, threads)

# The chat template of the PD tests: the messages' contents, concatenated (the test models
# have a word-level vocabulary and no template of their own).
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text_of(ids: list[int]) -> str:
    """The prompt text whose tokens are `ids` (make_model: id i is the word w{i-3})."""
    return " ".join(f"w{i - 3}" for i in ids)


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name with its labels as written: value}, plus
    {sample name: value summed over its label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, value = line.rsplit(" ", 1)
        name = key.split("{", 1)[0]
        out[key] = float(value)
        if key != name:
            out[name] = out.get(name, 0.0) + float(value)
    return out


def http_get(url: str, timeout=5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Process:
    """A child process with its log in `dir`/`name`.log; wait_healthy() polls `health`."""

    def __init__(self, argv: list[str], dir: str, name: str, port: int, env=None):
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = os.path.join(dir, f"{name}.log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         env=env)

    def wait_healthy(self, timeout_s=600, path="/health"):
        deadline = time.time() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}; log tail:\n"
                                   + open(self.log, errors="replace").read()[-3000:])
            try:
                http_get(self.url + path, timeout=2)
                return self
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"{self.name} not healthy in {timeout_s} s; see "
                                       f"{self.log}")
                time.sleep(0.5)

    def metrics(self) -> dict[str, float]:
        return metric_values(http_get(self.url + "/metrics"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def vllm_server(model: str, dir: str, name: str, role: str | None, extra: dict | None,
                prefix_caching: bool, max_model_len: int = 2048, chat_template=None,
                args=()) -> Process:
    """vLLM's OpenAI server; role None = no connector, else kvtier's with kv_role `role`
    and kv_connector_extra_config `extra`."""
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len),
            "--dtype", "bfloat16", "--enforce-eager", "--seed", "0",
            "--enable-prompt-tokens-details",
            "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"]
    if chat_template:
        path = os.path.join(dir, "chat_template.jinja")
        with open(path, "w") as f:
            f.write(chat_template)
        argv += ["--chat-template", path]
    if role is not None:
        argv += ["--kv-transfer-config", json.dumps(
            {"kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
             "kv_role": role, "kv_connector_extra_config": extra or {}})]
    argv += list(args)
    return Process(argv, dir, name, port)


def pd_proxy(dir: str, name: str, prefill: list[str], decode: list[str], args=()) -> Process:
    """kvtier-pd-proxy (python -m kvtier.pd_proxy: the console script of the package)."""
    port = free_port()
    argv = [sys.executable, "-m", "kvtier.pd_proxy", "--port", str(port)]
    for u in prefill:
        argv += ["--prefill", u]
    for u in decode:
        argv += ["--decode", u]
    return Process(argv + list(args), dir, name, port)
