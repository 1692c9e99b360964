"""The connector's configuration and the embedded (host + disk) store, on the real engine.

Bad kv_connector_extra_config values are errors naming the key; a vLLM block size that
does not divide kvtier's chunk size stops the engine with both numbers named; the
embedded store hits in-process (host tier) and from a fresh process (disk tier) with the
output of vLLM's own prefix-cache hit on the same tokens (docs/vllm.md "Exactness");
cost_probe_after reaches the native cost model, whose decisions are counted in
kvt_stats and exported as vllm:kvtier_cost_*_total (no engine).
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import harness
from kvtier.vllm_config import derive_namespace, parse_extra_config


class ExtraConfigTest(unittest.TestCase):
    def assertRefused(self, extra, *needles):
        with self.assertRaises(ValueError) as cm:
            parse_extra_config(extra)
        for n in needles:
            self.assertIn(n, str(cm.exception))

    def test_bad_values_name_their_key(self):
        self.assertRefused({"host_capcity": "1GiB"}, "host_capcity", "unknown key")
        self.assertRefused({"host_capacity": "lots"}, "host_capacity", "'lots'")
        self.assertRefused({"host_capacity": 0}, "host_capacity")
        self.assertRefused({"chunk_tokens": 0}, "chunk_tokens", "0")
        self.assertRefused({"chunk_tokens": "abc"}, "chunk_tokens", "'abc'")
        self.assertRefused({"kvtierd": "localhost"}, "kvtierd", "'localhost'")
        self.assertRefused({"use_cost_model": "maybe"}, "use_cost_model", "'maybe'")
        self.assertRefused({"token": "secret-token"}, "token", "kvtierd")
        self.assertRefused({"kvtierd": "unix:///x.sock", "disk_dir": "/tmp/d"}, "disk_dir")
        self.assertRefused({"kvtierd": "unix:///x.sock", "token_file": "/nonexistent/t"},
                           "token_file", "/nonexistent/t")
        self.assertRefused({"load_failure_policy": "retry"}, "load_failure_policy", "'retry'")
        self.assertRefused({"daemon_deadline_ms": 0}, "daemon_deadline_ms")
        self.assertRefused({"load_async": "maybe"}, "load_async", "'maybe'")
        for bad in (-1, 1000001, "often", 2.5, True, None):
            self.assertRefused({"cost_probe_after": bad},
                               "kv_connector_extra_config.cost_probe_after", repr(bad),
                               "an integer in 0..1000000")

    def test_good_values(self):
        c = parse_extra_config({"kvtierd": "unix:///run/k.sock", "token": "t0k3n-123",
                                "tenant": "team-a", "chunk_tokens": 512})
        self.assertEqual((c.daemon_address, c.token, c.tenant, c.chunk_tokens, c.embedded),
                         ("unix:///run/k.sock", "t0k3n-123", "team-a", 512, False))
        c = parse_extra_config({"host_capacity": "512MiB", "disk_dir": "/tmp/d",
                                "disk_capacity": "2GiB"})
        self.assertEqual((c.host_capacity_bytes, c.disk_capacity_bytes, c.embedded),
                         (512 << 20, 2 << 30, True))
        self.assertTrue(c.loads_async)  # the default
        self.assertFalse(parse_extra_config({"kvtierd": "unix:///k.sock",
                                             "load_async": False}).loads_async)
        self.assertFalse(parse_extra_config({"load_async": "false"}).loads_async)
        self.assertEqual(parse_extra_config({}).cost_probe_after, 32)
        for value, want in ((0, 0), (1, 1), (1000000, 1000000), ("64", 64)):
            self.assertEqual(parse_extra_config({"cost_probe_after": value}).cost_probe_after,
                             want)

    def test_block_size_not_dividing_chunk_names_both(self):
        from vllm.engine.arg_utils import EngineArgs
        vc = EngineArgs(model=harness.tiny_model(), enforce_eager=True,
                        enable_prefix_caching=False).create_engine_config()
        self.assertEqual(vc.cache_config.block_size, 128)
        with self.assertRaises(ValueError) as cm:
            derive_namespace(vc, parse_extra_config({"chunk_tokens": 200}))
        self.assertIn("block size 128", str(cm.exception))
        self.assertIn("chunk size 200", str(cm.exception))

    def test_engine_does_not_start_with_a_bad_chunk_size(self):
        code = ("import sys\nsys.path.insert(0, %r)\nimport engine_run\n"
                "engine_run.build_llm({'model': %r, 'connector': {'chunk_tokens': 200}})\n"
                "print('ENGINE STARTED')\n" % (harness.HERE, harness.tiny_model()))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300)
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("ENGINE STARTED", out)
        self.assertIn("block size 128 does not divide kvtier's chunk size 200", out)


class CostProbeTest(unittest.TestCase):
    """cost_probe_after reaches the native connector (kvt_options.cost_probe_after) and its
    decisions come back as kvt_stats.cost_* and as vllm:kvtier_cost_*_total. No engine: a
    block-view connector built from the parsed config as the vLLM connector builds it."""

    LAYERS, HEADS, HEAD_DIM, CHUNK = 2, 2, 8, 16
    BLOCK_BYTES = 2 * HEADS * HEAD_DIM * 2 * CHUNK  # K and V, bfloat16, one block per chunk

    def connector(self, extra):
        import ctypes
        from kvtier._native import Connector
        from kvtier.vllm_config import Namespace
        from kvtier.vllm_support import _options
        cfg = parse_extra_config(dict(extra, chunk_tokens=self.CHUNK, host_capacity="1MiB"))
        ns = Namespace(model_id="cost-probe-test", num_layers=self.LAYERS,
                       num_kv_heads=self.HEADS, head_dim=self.HEAD_DIM, dtype="bfloat16",
                       layout="flashinfer", block_size=self.CHUNK, packing="flashinfer",
                       tp_rank=0, tp_world_size=1, engine_extra="{}")
        c = Connector(_options(cfg, ns))
        self.addCleanup(c.close)
        layers = [(ctypes.c_uint8 * (4 * self.BLOCK_BYTES))() for _ in range(self.LAYERS)]
        c.test_layers = layers  # the view's memory lives as long as the connector
        c.register_block_view([ctypes.addressof(b) for b in layers], self.CHUNK, 4,
                              self.BLOCK_BYTES)
        self.prompt = list(range(1, 2 * self.CHUNK + 2))  # two chunks and a last token
        self.assertEqual(c.store_blocks(self.prompt, [0, 1]), 2)
        c.flush()
        # 8 prefills (the fit's minimum) measured at 10 ns per token: recomputing a chunk
        # (160 ns) is far cheaper than loading it from the host tier (~20 us predicted),
        # so the cost model recomputes, and only probes load.
        for t in range(16, 16 * 9, 16):
            c.observe_prefill(t, 0, 1e-8 * t)
        return c

    def loads(self, c, n):
        return [c.lookup(self.prompt)[0] for _ in range(n)]

    def test_probe_after_2_loads_one_chunk_every_third_lookup(self):
        c = self.connector({"cost_probe_after": 2})
        self.assertEqual(self.loads(c, 7), [0, 0, 16, 0, 0, 16, 0])
        s = c.stats()
        self.assertEqual((s["cost_recompute"], s["cost_probe"], s["cost_load_partial"],
                          s["cost_load_all"]), (5, 2, 2, 0))

    def test_zero_never_probes_and_the_default_probes_the_33rd(self):
        c = self.connector({"cost_probe_after": 0})
        self.assertEqual(self.loads(c, 40), [0] * 40)
        self.assertEqual((c.stats()["cost_recompute"], c.stats()["cost_probe"]), (40, 0))
        c = self.connector({})
        self.assertEqual(self.loads(c, 33), [0] * 32 + [16])
        self.assertEqual((c.stats()["cost_recompute"], c.stats()["cost_probe"]), (32, 1))

    def test_decisions_reach_vllm_prometheus_counters(self):
        """The scheduler half reports the decisions (its lookups make them); each becomes
        vllm:kvtier_<field>_total, as every kvt_stats field does."""
        from functools import partial
        from types import SimpleNamespace
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
        from kvtier._native import STAT_FIELDS
        from kvtier.vllm_support import _SCHEDULER_STATS, KVTierPromMetrics
        cost = ["cost_load_all", "cost_load_partial", "cost_recompute", "cost_probe"]
        self.assertEqual(STAT_FIELDS[-4:], cost)
        self.assertTrue(set(cost) <= set(_SCHEDULER_STATS))
        c = self.connector({"cost_probe_after": 2})
        self.loads(c, 4)
        now = c.stats()
        reg = CollectorRegistry()  # the classes vLLM passes, on a registry of our own
        types = {t: partial(t, registry=reg) for t in (Gauge, Counter, Histogram)}
        prom = KVTierPromMetrics(SimpleNamespace(kv_transfer_config=None), types,
                                 ["model_name", "engine"], {0: ["cost-probe-test", "0"]})
        prom.observe({f"kvtier_{k}": now[k] for k in _SCHEDULER_STATS}, 0)
        text = generate_latest(reg).decode()
        labels = '{engine="0",model_name="cost-probe-test"}'
        for name, want in (("cost_recompute", 3), ("cost_probe", 1), ("cost_load_partial", 1),
                           ("lookups", 4)):
            self.assertIn(f"vllm:kvtier_{name}_total{labels} {float(want)}", text)
        for f in STAT_FIELDS:
            self.assertIn(f"# TYPE vllm:kvtier_{f}_total counter", text)


class DetectLayoutTest(unittest.TestCase):
    """register_kv_caches accepts the CPU backend's packed blocks and the GPU layouts
    (shapes from vLLM's backends' get_kv_cache_shape); anything else is refused."""

    def test_layouts(self):
        import torch
        from kvtier.vllm import detect_layout
        N, H, B, D = 10, 4, 16, 64
        t = torch.empty
        self.assertEqual(detect_layout(t(N, H, B, 2 * D), H, D, B), ("cpu-blocks", N))
        self.assertEqual(detect_layout(t(2, N, B, H, D), H, D, B), ("flash_attn_nhd", N))
        hnd = t(2, N, H, B, D).permute(0, 1, 3, 2, 4)  # logical NHD shape, HND memory
        self.assertEqual(detect_layout(hnd, H, D, B), ("flash_attn_hnd", N))
        self.assertEqual(detect_layout(t(N, 2, B, H, D), H, D, B), ("flashinfer", N))
        self.assertEqual(detect_layout(t(N, B, 576), 1, 576, B), ("mla", N))
        with self.assertRaises(ValueError) as cm:
            detect_layout(t(N, B, H, D), H, D, B)
        self.assertIn(str([N, B, H, D]), str(cm.exception))


class PipInstallTest(unittest.TestCase):
    def test_pip_install_offline_bundles_the_library(self):
        """`pip install ./connectors/vllm` as the docs say it, with pip's build isolation
        and no package index (PIP_NO_INDEX): nothing to download (issue 21 item 10)."""
        src = os.path.join(harness.HERE, "..", "..", "connectors", "vllm")
        with tempfile.TemporaryDirectory() as target, tempfile.TemporaryDirectory() as cwd:
            work = os.path.join(cwd, "pkg")
            shutil.copytree(src, work, ignore=shutil.ignore_patterns("lib", "build", "*.egg-info"))
            env = dict(os.environ, KVTIER_LIB=os.environ["KVTIER_LIB"], PIP_NO_INDEX="1",
                       PIP_FIND_LINKS="")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", target,
                                work],
                               capture_output=True, text=True, env=env, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            env = {k: v for k, v in os.environ.items() if k not in ("KVTIER_LIB", "PYTHONPATH")}
            env["PYTHONPATH"] = target
            r = subprocess.run([sys.executable, "-c", "import kvtier; print(kvtier.library_path())"],
                               capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), os.path.join(target, "kvtier", "lib", "libkvtier.so"))


class EmbeddedStoreTest(unittest.TestCase):
    def test_host_hit_in_process_then_disk_hit_in_a_fresh_process(self):
        from vllm import LLM
        d = tempfile.mkdtemp(prefix="kvt-vllm-embedded-")
        try:
            model = harness.tiny_model()
            cfg = {"host_capacity": "64MiB", "disk_dir": os.path.join(d, "disk"),
                   "disk_capacity": "256MiB", "use_cost_model": False}
            sync = dict(cfg, load_async=False)  # in process: sync loads; fresh: async
            llm = LLM(model=model, enable_prefix_caching=False, max_model_len=2048,
                      dtype="bfloat16", enforce_eager=True, seed=0,
                      kv_transfer_config={"kv_connector": "KVTierConnector",
                                          "kv_connector_module_path": "kvtier.vllm",
                                          "kv_role": "kv_both",
                                          "kv_connector_extra_config": sync})
            p = harness.prompt(42, 700)
            ref_proc = harness.run_engine({"model": model, "connector": None, "prompts": [p],
                                           "prefix_hit_tokens": 512}, d, "reference")
            cold, warm = harness.generate(llm, [p, p])
            ref = harness.engine_result(ref_proc)
            hit = ref["hit_rows"][0]  # vLLM's own prefix-cache hit on the 512 tokens
            self.assertEqual(cold["num_cached_tokens"], 0)
            self.assertEqual(cold["logprobs"], ref["rows"][0]["logprobs"])
            self.assertEqual(warm["num_cached_tokens"], 512)
            self.assertEqual(warm["token_ids"], hit["token_ids"])
            self.assertEqual(warm["logprobs"], hit["logprobs"])
            from vllm.distributed.kv_transfer import get_kv_transfer_group
            conn = get_kv_transfer_group()
            stats = conn.kvtier_stats()
            self.assertEqual(stats["load_chunks_ok"], 2)
            self.assertEqual(stats["store_chunks_put"], 2)
            conn.shutdown()  # drains the write-back to disk and releases the disk tier
            fresh = harness.engine_result(harness.run_engine(
                {"model": model, "connector": cfg, "prompts": [p]}, d, "fresh"))
            row = fresh["rows"][0]
            self.assertEqual(row["num_cached_tokens"], 512)
            self.assertEqual(row["token_ids"], hit["token_ids"])
            self.assertEqual(row["logprobs"], hit["logprobs"])
            self.assertEqual(fresh["kvtier"]["load_chunks_ok"], 2)
            # kv_role: a consumer loads p but stores nothing (not q either); a producer
            # never looks up (q twice: computed twice) and stores q's 2 chunks.
            q = harness.prompt(44, 700)
            cons = harness.engine_result(harness.run_engine(
                {"model": model, "connector": cfg, "prompts": [p, q],
                 "kv_role": "kv_consumer"}, d, "consumer"))
            self.assertEqual(cons["rows"][0]["num_cached_tokens"], 512)
            self.assertEqual(cons["rows"][0]["token_ids"], hit["token_ids"])
            self.assertEqual(cons["kvtier"]["store_chunks_put"], 0)
            prod = harness.engine_result(harness.run_engine(
                {"model": model, "connector": cfg, "prompts": [q, q],
                 "kv_role": "kv_producer"}, d, "producer"))
            self.assertEqual([r["num_cached_tokens"] for r in prod["rows"]], [0, 0])
            self.assertEqual(prod["kvtier"]["store_chunks_put"], 2)
            self.assertEqual(prod["kvtier"]["load_chunks_ok"], 0)
            # Damaged records, loaded synchronously (the async path's failures are in
            # test_shared_kvtierd): the blocks are recomputed, the output is identical.
            files = glob.glob(os.path.join(d, "disk", "**", "rec-*.dat"), recursive=True)
            self.assertTrue(files, "the embedded disk tier wrote record files")
            for path in files:
                with open(path, "r+b") as f:
                    for off in range(2048, os.path.getsize(path), 4096):
                        f.seek(off)
                        b = f.read(1)
                        f.seek(off)
                        f.write(bytes([b[0] ^ 0x5A]))
            # A computed prompt first: vLLM waits for every layer in its forward, so the
            # load after it goes layer by layer (load_per_layer, the default).
            bad = harness.engine_result(harness.run_engine(
                {"model": model, "connector": sync, "prompts": [harness.prompt(43, 300), p],
                 "connector_module": "hooked_connector",
                 "connector_class": "HookedKVTierConnector",
                 "hooks": ["loads_seen", "async_loads_seen", "layer_releases",
                           "failed_blocks"]}, d, "damaged"))
            h = bad["hooks"]
            self.assertEqual((h["loads_seen"], h["async_loads_seen"]), (1, 0))
            self.assertEqual([layer for layer, _ in h["layer_releases"]], [0, 1])  # per-layer
            self.assertEqual(h["failed_blocks"], 4)  # 512 tokens / 128, recomputed
            self.assertEqual(bad["rows"][1]["token_ids"], cold["token_ids"])
            self.assertEqual(bad["rows"][1]["logprobs"], cold["logprobs"])
            self.assertEqual(bad["kvtier"]["load_chunks_ok"], 0)
            self.assertGreater(bad["kvtier"]["load_chunks_failed"], 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class DelayedFreeTest(unittest.TestCase):
    """A finished request's blocks stay allocated until its store copied them.

    The KV cache has room for one request only (5 blocks of 128 tokens), and the store
    thread sleeps 2 s before it copies (a slow store). Prompt P finishes, Q (another
    prompt) needs P's blocks: were they freed at once, Q's prefill would overwrite them
    before P's store copied them, kvtier would hold Q's KV under P's tokens, and P's
    repeat would load it. With request_finished delaying the free (finished_sending),
    Q waits for the blocks and P's repeat loads P's own KV: the output of vLLM's own
    prefix-cache hit on those 512 tokens (a reference process, no connector).
    (KVT_TEST_BREAK_DELAYED_FREE=1 in the engine's env makes this test fail.)"""

    def test_store_copies_blocks_before_vllm_reuses_them(self):
        d = tempfile.mkdtemp(prefix="kvt-vllm-delayed-free-")
        try:
            p, q = harness.prompt(61, 600), harness.prompt(62, 600)
            env = {"KVT_TEST_STORE_DELAY_S": "2"}
            env.update({k: v for k, v in os.environ.items()
                        if k == "KVT_TEST_BREAK_DELAYED_FREE"})
            ref_proc = harness.run_engine({"model": harness.tiny_model(), "connector": None,
                                           "prompts": [p], "prefix_hit_tokens": 512},
                                          d, "reference")
            out = harness.engine_result(harness.run_engine(
                {"model": harness.tiny_model(), "prompts": [p, q, p], "flush_before": [2],
                 "connector": {"host_capacity": "64MiB", "use_cost_model": False},
                 "connector_module": "hooked_connector",
                 "connector_class": "HookedKVTierConnector",
                 "num_gpu_blocks_override": 6, "max_model_len": 640, "env": env},
                d, "delayed-free"))
            cold, other, warm = out["rows"]
            hit = harness.engine_result(ref_proc)["hit_rows"][0]
            self.assertEqual((cold["num_cached_tokens"], other["num_cached_tokens"]), (0, 0))
            self.assertEqual(warm["num_cached_tokens"], 512)
            self.assertEqual(warm["token_ids"], hit["token_ids"])
            self.assertEqual(warm["logprobs"], hit["logprobs"])
            self.assertEqual(out["kvtier"]["store_chunks_put"], 4)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
