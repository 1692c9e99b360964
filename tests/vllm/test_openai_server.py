"""vLLM's OpenAI server with the kvtier connector, driven by the `openai` client.

The server runs with the embedded host store (one server process, one cache) and
--no-enable-prefix-caching, so cached tokens in `usage` are kvtier's. A repeat of a
prompt reports 512 cached prompt tokens and returns the completion and logprobs of vLLM's
own prefix-cache hit on the same 512 tokens (docs/vllm.md, "Exactness": the reference for
a load, since the other tokens are computed in another batch shape than a cold prefill);
the first request returns vLLM's cold answer (both references computed in this process,
without any connector); the server's /metrics shows kvtier's counters
(vllm:kvtier_*_total).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import harness


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value summed over its label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class OpenAIServerTest(unittest.TestCase):
    def test_completions_match_references_and_usage_shows_cached_tokens(self):
        import openai
        d = tempfile.mkdtemp(prefix="kvt-vllm-server-")
        model = harness.tiny_model()
        port = free_port()
        kv = {"kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
              "kv_role": "kv_both",
              "kv_connector_extra_config": {"host_capacity": "64MiB", "use_cost_model": False}}
        log = open(os.path.join(d, "server.log"), "wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
             "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
             "--dtype", "bfloat16", "--enforce-eager", "--no-enable-prefix-caching",
             "--enable-prompt-tokens-details", "--seed", "0",
             "--kv-transfer-config", json.dumps(kv)],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            ids = harness.prompt(7, 650)
            text = " ".join(f"w{i - 3}" for i in ids)  # make_model: id i = word w{i-3}
            # The references (no connector) run here while the server starts: cold, and
            # vLLM's own prefix-cache hit on the 512 tokens kvtier loads.
            from vllm import LLM
            ref_llm = LLM(model=model, enable_prefix_caching=True, max_model_len=2048,
                          dtype="bfloat16", enforce_eager=True, seed=0)
            ref_llm.reset_prefix_cache()
            ref = harness.generate(ref_llm, [ids])[0]
            ref_hit = harness.prefix_hit_row(ref_llm, ids, 512)
            deadline = time.time() + 300
            while True:
                self.assertIsNone(server.poll(), "server exited; see " + log.name)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                        break
                except OSError:
                    self.assertLess(time.time(), deadline, "server not healthy in 300 s")
                    time.sleep(0.5)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
            res = []
            for _ in range(2):
                r = client.completions.create(model=model, prompt=text, max_tokens=8,
                                              temperature=0, logprobs=1)
                details = r.usage.prompt_tokens_details
                res.append((r.choices[0].text, r.choices[0].logprobs.token_logprobs,
                            r.usage.prompt_tokens, details.cached_tokens if details else 0))
            (cold_text, cold_lp, n, cold_cached), (warm_text, warm_lp, n2, warm_cached) = res
            self.assertEqual(n, len(ids))
            self.assertEqual(n2, len(ids))
            self.assertEqual(cold_cached or 0, 0)
            self.assertEqual(warm_cached, 512)
            self.assertEqual(warm_text, ref_hit["text"])
            self.assertEqual(warm_lp, ref_hit["logprobs"])
            self.assertEqual(cold_text, ref["text"])
            self.assertEqual(cold_lp, ref["logprobs"])
            # kvtier's counters on vLLM's own Prometheus endpoint (build_prom_metrics).
            deadline = time.time() + 30
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as m:
                    got = metric_values(m.read().decode())
                if got.get("vllm:kvtier_load_chunks_ok_total") == 2 or time.time() > deadline:
                    break
                time.sleep(0.5)
            self.assertEqual(got.get("vllm:kvtier_load_chunks_ok_total"), 2)
            self.assertEqual(got.get("vllm:kvtier_load_chunks_failed_total"), 0)
            self.assertEqual(got.get("vllm:kvtier_lookup_hit_tokens_total"), 512)
            self.assertEqual(got.get("vllm:kvtier_lookups_total"), 2)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
