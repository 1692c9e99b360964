"""Disaggregated prefill (PD) through kvtierd: kvtier-pd-proxy in front of real vLLM servers.

One kvtierd; a prefill instance (vLLM's OpenAI server, kv_role kv_producer, no prefix
cache); a decode instance (kv_role kv_consumer, vLLM's prefix cache on, so it can hold a
prefix itself); kvtier-pd-proxy started as a process (python -m kvtier.pd_proxy), driven
by the `openai` client; a second proxy in this process whose after_handoff hook acts
between prefill and decode. The reference is one colocated vLLM without a connector (an
in-process engine, prefix cache on): a request whose decode instance had k prompt tokens
cached (loaded from kvtierd or held by its own prefix cache) must give exactly the greedy
tokens and logprobs of the reference with its prefix cache holding those k tokens
(docs/vllm.md, "Exactness"); nothing cached, or the whole prompt loaded (vLLM recomputes
its last token), the reference's cold run. Chunks are 256 tokens, blocks 128.

The cases follow vLLM's own PD tests: a prompt shorter than a chunk, a long prompt, a
prefix the decode instance already holds (a hit on the decoder only), a partial hit (the
decoder holds a prefix, kvtierd the rest), several concurrent requests (completions,
chat, streamed); kvtierd killed between prefill and decode (the decode instance
recomputes, the answer is identical); the producer never loads and the consumer never
stores (kvtierd's Put/Get RPC counters around each half).
"""

import asyncio
import os
import shutil
import signal
import tempfile
import threading
import time
import unittest

import harness
import pd_servers
from pd_servers import text_of

CHUNK = 256
MAX_TOKENS = 8


class PDTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-vllm-pd-")
        cls.model = harness.tiny_model("tiny", seed=0)
        cls.daemon = harness.Kvtierd(cls.dir).start()
        extra = {"kvtierd": cls.daemon.address, "use_cost_model": False,
                 "daemon_deadline_ms": 1000}
        cls.producer = pd_servers.vllm_server(cls.model, cls.dir, "producer", "kv_producer",
                                              extra, prefix_caching=False,
                                              chat_template=pd_servers.CHAT_TEMPLATE)
        cls.consumer = pd_servers.vllm_server(cls.model, cls.dir, "consumer", "kv_consumer",
                                              extra, prefix_caching=True,
                                              chat_template=pd_servers.CHAT_TEMPLATE)
        cls.proxy = pd_servers.pd_proxy(cls.dir, "proxy", [cls.producer.url],
                                        [cls.consumer.url])
        from vllm import LLM
        cls.ref_llm = LLM(model=cls.model, enable_prefix_caching=True, max_model_len=2048,
                          dtype="bfloat16", enforce_eager=True, seed=0)
        for p in (cls.producer, cls.consumer, cls.proxy):
            p.wait_healthy()
        cls.hook = None  # the in-process proxy's after_handoff action
        cls.hooked = cls._start_hooked_proxy()

    @classmethod
    def _start_hooked_proxy(cls):
        import uvicorn
        from kvtier.pd_proxy import ProxyOptions, create_app

        def after_handoff(info):
            if cls.hook is not None:
                cls.hook(info)
        port = pd_servers.free_port()
        app = create_app(ProxyOptions(prefill=[cls.producer.url], decode=[cls.consumer.url]),
                         after_handoff=after_handoff)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        t = threading.Thread(target=server.run, daemon=True)
        t.start()
        cls.hooked_server = server
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                pd_servers.http_get(url + "/health")
                return url
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.hooked_server.should_exit = True
        for p in (getattr(cls, "proxy", None), getattr(cls, "consumer", None),
                  getattr(cls, "producer", None)):
            if p is not None:
                p.stop()
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def reference(self, ids: list[int], cached: int) -> dict:
        """The colocated reference for a request whose decoder had `cached` tokens."""
        if cached in (0, len(ids)):
            self.ref_llm.reset_prefix_cache()
            return harness.generate(self.ref_llm, [ids], MAX_TOKENS)[0]
        return harness.prefix_hit_row(self.ref_llm, ids, cached, MAX_TOKENS)

    def client(self, base: str):
        import openai
        return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0,
                             timeout=600)

    def complete(self, ids, base=None, stream=False, chat=False) -> dict:
        """One request through a proxy; the answer as a row (token ids, logprobs, cached
        prompt tokens) plus the proxy's x-kvtier-pd-* headers."""
        c = self.client(base or self.proxy.url)
        common = dict(model=self.model, max_tokens=MAX_TOKENS, temperature=0,
                      extra_body={"return_token_ids": True, "ignore_eos": True})
        if stream:
            common["stream"] = True
            common["stream_options"] = {"include_usage": True}
        if chat:
            raw = c.chat.completions.with_raw_response.create(
                messages=[{"role": "user", "content": text_of(ids)}], logprobs=True,
                **common)
        else:
            raw = c.completions.with_raw_response.create(prompt=text_of(ids), logprobs=1,
                                                         **common)
        headers = {k: v for k, v in raw.headers.items() if k.startswith("x-kvtier-pd-")}
        r = raw.parse()
        tokens, logprobs, usage = [], [], None
        for part in (r if stream else [r]):
            if part.usage is not None:
                usage = part.usage
            for ch in part.choices:
                tokens += list(getattr(ch, "token_ids", None) or [])
                if chat:
                    logprobs += [x.logprob for x in (ch.logprobs.content if ch.logprobs else [])]
                elif ch.logprobs is not None:
                    logprobs += list(ch.logprobs.token_logprobs)
        self.assertIsNotNone(usage, "the answer has usage")
        self.assertEqual(usage.prompt_tokens, len(ids))
        details = usage.prompt_tokens_details
        return {"token_ids": tokens, "logprobs": logprobs,
                "cached": (details.cached_tokens if details else 0) or 0, "headers": headers}

    def consumer_stats(self) -> dict[str, float]:
        m = self.consumer.metrics()
        return {k: m.get(f"vllm:kvtier_{k}_total", 0.0)
                for k in ("load_chunks_ok", "load_chunks_failed", "lookups",
                          "store_chunks_put", "store_chunks_taken")}

    def assertMatches(self, row, ids, cached):
        self.assertEqual(row["cached"], cached, "decoder's cached prompt tokens")
        ref = self.reference(ids, cached)
        self.assertEqual(row["token_ids"], ref["token_ids"])
        self.assertEqual(row["logprobs"], ref["logprobs"])

    # ------------------------------------------------------------------ cases
    def test_1_prompt_shorter_than_a_chunk(self):
        ids = harness.prompt(101, 100)
        before = self.consumer_stats()
        row = self.complete(ids)
        self.assertEqual(row["headers"]["x-kvtier-pd-ready"], "none",
                         "nothing stored, nothing to wait for")
        self.assertMatches(row, ids, 0)
        self.assertEqual(self.consumer_stats()["load_chunks_ok"], before["load_chunks_ok"])

    def test_2_long_prompt_loads_every_complete_chunk(self):
        ids = harness.prompt(102, 1800)  # 7 chunks + 8 tokens the decoder computes
        before = self.consumer_stats()
        row = self.complete(ids)
        self.assertEqual(row["headers"]["x-kvtier-pd-ready"], "yes")
        self.assertMatches(row, ids, 7 * CHUNK)
        self.assertEqual(self.consumer_stats()["load_chunks_ok"] - before["load_chunks_ok"], 7)

    def test_3_prefix_the_decoder_holds_is_a_hit_on_the_decoder_only(self):
        x = harness.prompt(103, 600)
        row = self.complete(x)
        self.assertMatches(row, x, 2 * CHUNK)  # loaded from kvtierd
        # The same first 512 tokens, another tail: the decoder's own prefix cache holds
        # them (the blocks it loaded for x), kvtier loads nothing.
        x2 = x[:2 * CHUNK] + harness.prompt(104, 90)
        before = self.consumer_stats()
        row = self.complete(x2)
        self.assertEqual(row["headers"]["x-kvtier-pd-ready"], "yes")
        self.assertMatches(row, x2, 2 * CHUNK)
        self.assertEqual(self.consumer_stats()["load_chunks_ok"], before["load_chunks_ok"])

    def test_4_partial_hit_decoder_holds_a_prefix_kvtierd_the_rest(self):
        x = harness.prompt(105, 300)
        self.assertMatches(self.complete(x), x, CHUNK)  # the decoder now holds 256 tokens
        y = x[:CHUNK] + harness.prompt(106, 600)  # 856 tokens: 3 chunks + 88
        before = self.consumer_stats()
        row = self.complete(y)
        self.assertMatches(row, y, 3 * CHUNK)
        self.assertEqual(self.consumer_stats()["load_chunks_ok"] - before["load_chunks_ok"], 2,
                         "chunks 1 and 2 from kvtierd, chunk 0 from the decoder's cache")

    def test_5_concurrent_requests_completions_chat_and_streams(self):
        cases = [(harness.prompt(110 + i, n), stream, chat) for i, (n, stream, chat) in
                 enumerate([(600, False, False), (700, True, False), (520, False, True),
                            (900, True, True), (300, True, False), (100, False, True)])]
        rows = [None] * len(cases)
        errors = []

        def run(i):
            ids, stream, chat = cases[i]
            try:
                rows[i] = self.complete(ids, stream=stream, chat=chat)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        if errors:
            raise errors[0]
        for (ids, stream, chat), row in zip(cases, rows):
            with self.subTest(tokens=len(ids), stream=stream, chat=chat):
                self.assertEqual(len(row["token_ids"]), MAX_TOKENS)
                self.assertMatches(row, ids, len(ids) // CHUNK * CHUNK)

    def test_6_producer_never_loads_consumer_never_stores(self):
        counts = {}

        def rpc(m):
            d = self.daemon_metrics()
            return {k: d.get(f'kvtier_rpc_total{{method="{k}",code="OK"}}', 0.0)
                    for k in ("Put", "Get", "Lookup")}

        self.daemon_metrics = lambda: pd_servers.metric_values(self.daemon.metrics())
        counts["start"] = rpc(None)
        type(self).hook = lambda info: counts.__setitem__("handoff", rpc(None))
        try:
            ids = harness.prompt(120, 800)  # 3 chunks + 32
            row = self.complete(ids, base=self.hooked)
        finally:
            type(self).hook = None
        counts["end"] = rpc(None)
        self.assertMatches(row, ids, 3 * CHUNK)
        s, h, e = counts["start"], counts["handoff"], counts["end"]
        self.assertEqual(h["Put"] - s["Put"], 3, "the producer put the prompt's 3 chunks")
        self.assertEqual(h["Get"] - s["Get"], 0, "the producer read nothing")
        self.assertEqual(e["Put"] - h["Put"], 0, "the consumer stored nothing")
        self.assertEqual(e["Get"] - h["Get"], 3, "the consumer read the 3 chunks")
        # Over the whole run, in vLLM's own counters: the producer never looked anything
        # up nor loaded, the consumer never stored.
        p = self.producer.metrics()
        self.assertEqual(p.get("vllm:kvtier_lookups_total", 0), 0)
        self.assertEqual(p.get("vllm:kvtier_load_chunks_ok_total", 0), 0)
        self.assertGreater(p.get("vllm:kvtier_store_chunks_put_total", 0), 0)
        c = self.consumer_stats()
        self.assertEqual(c["store_chunks_put"] + c["store_chunks_taken"], 0)
        self.assertGreater(c["load_chunks_ok"], 0)

    def test_7_kvtierd_killed_between_prefill_and_decode_recomputes(self):
        ids = harness.prompt(130, 700)
        seen = {}

        def kill(info):
            seen.update(info)
            self.daemon.stop(signal.SIGKILL)
        before = self.consumer_stats()
        type(self).hook = kill
        try:
            row = self.complete(ids, base=self.hooked)
        finally:
            type(self).hook = None
            self.daemon.start()  # the disk tier keeps what was stored
        self.assertEqual(seen.get("ready"), "yes", "the chunks were in kvtierd before the kill")
        self.assertMatches(row, ids, 0)  # nothing loaded: computed, same answer
        self.assertEqual(self.consumer_stats()["load_chunks_ok"], before["load_chunks_ok"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
