"""vLLM with kvtier end to end on the CPU engine, several processes sharing one kvtierd.

Process A (engine_run.py, connector) prefills prompts P0..P4 and stores them in kvtierd;
a reference process (no connector) runs the same prompts. This test process is a second
vLLM instance B (in-process engine, the hookable connector of hooked_connector.py) and
checks, in order: hits from A's stores with identical greedy tokens and logprobs; hits
after a kvtierd restart (disk tier); kvtierd SIGKILLed and SIGSTOPped between lookup and
load (recompute, identical, no hang); corrupted records (recompute, identical). With
the default load_async, loads are asynchronous: B's requests wait for their load
(WAITING_FOR_REMOTE_KVS), failures come back as failed blocks with finished_recving.
Other processes run against the same kvtierd with a different block size (F) and a
different dtype (G): no hit; configs with a different model derive namespaces that
miss. kvtier's counters reach vLLM's Prometheus metrics (vllm:kvtier_*).
enable_prefix_caching=False in A and B: every hit is kvtier's. The reference process runs
each prompt cold and with vLLM's own prefix cache holding its first 512 tokens: a kvtier
load of 512 tokens is compared with the latter (docs/vllm.md, "Exactness").
"""

import glob
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import unittest

import harness

PROMPT_TOKENS = 600  # 2 complete chunks of 256 = 512 loadable tokens
LOADABLE = 512


class SharedKvtierdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-vllm-")
        cls.model = harness.tiny_model("tiny", seed=0)
        # P5 ends on a chunk boundary: its async load covers the whole prompt.
        cls.prompts = [harness.prompt(i, PROMPT_TOKENS) for i in range(1, 6)]
        cls.prompts.append(harness.prompt(6, 2 * 256))
        cls.daemon = harness.Kvtierd(cls.dir).start()
        cls.conn_cfg = {"kvtierd": cls.daemon.address, "use_cost_model": False,
                        "daemon_deadline_ms": 1000, "tenant": "tests"}
        base = dict(model=cls.model, prompts=cls.prompts)
        # Cold rows, and vLLM's own prefix-cache hit on the first LOADABLE tokens: the
        # reference for a kvtier load of those tokens (docs/vllm.md, "Exactness").
        ref = harness.run_engine(dict(base, connector=None, prefix_hit_tokens=LOADABLE),
                                 cls.dir, "reference")
        a = harness.run_engine(dict(base, connector=cls.conn_cfg), cls.dir, "A")
        ref_out = harness.engine_result(ref)
        cls.ref, cls.ref_hit = ref_out["rows"], ref_out["hit_rows"]
        cls.a = harness.engine_result(a)
        # F: same model and kvtierd, block size 32 (chunk 256 still divisible): no hit.
        cls.f = harness.run_engine(dict(base, connector=cls.conn_cfg, block_size=32,
                                        prompts=cls.prompts[:1]), cls.dir, "F")
        # G: same model, prompt and kvtierd, float32 instead of bfloat16: no hit.
        cls.g = harness.run_engine(dict(base, connector=cls.conn_cfg, dtype="float32",
                                        prompts=cls.prompts[:1]), cls.dir, "G")
        from vllm import LLM
        import hooked_connector
        cls.hooks = hooked_connector.HookedKVTierConnector
        cls.llm = LLM(model=cls.model, enable_prefix_caching=False, max_model_len=2048,
                      dtype="bfloat16", enforce_eager=True, seed=0, disable_log_stats=False,
                      kv_transfer_config={"kv_connector": "HookedKVTierConnector",
                                          "kv_connector_module_path": "hooked_connector",
                                          "kv_role": "kv_both",
                                          "kv_connector_extra_config": cls.conn_cfg})
        # F and G ran beside this process's start-up; they must be done before the tests
        # below restart, kill or pause the daemon (a put of theirs would meet that).
        cls.f_out = harness.engine_result(cls.f)
        cls.g_out = harness.engine_result(cls.g)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop(signal.SIGCONT)
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def generate(self, i, timeout=180):
        """Runs prompt i in B; fails (instead of hanging) when it takes over `timeout` s."""
        box = {}

        def body():
            try:
                box["row"] = harness.generate(self.llm, [self.prompts[i]])[0]
            except BaseException as e:  # noqa: BLE001 - reported below
                box["err"] = e
        t = threading.Thread(target=body, daemon=True)
        t.start()
        t.join(timeout)
        self.assertFalse(t.is_alive(), f"request {i} did not finish within {timeout} s")
        if "err" in box:
            raise box["err"]
        return box["row"]

    def assertSameOutput(self, row, i):
        """A request that loaded LOADABLE tokens of a longer prompt against vLLM's own
        prefix-cache hit on those tokens; anything else (nothing loaded, a failed load
        recomputed, a whole-prompt load whose last token vLLM recomputes, which no
        prefix-cache hit of whole blocks reproduces) against the cold run."""
        ref = self.ref[i]
        if row["num_cached_tokens"] == LOADABLE and self.ref_hit[i] is not None:
            ref = self.ref_hit[i]
        self.assertEqual(row["token_ids"], ref["token_ids"])
        self.assertEqual(row["logprobs"], ref["logprobs"])

    def worker_stats(self):
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        return get_kv_transfer_group().kvtier_stats()

    def test_0_first_process_stores_and_matches_reference(self):
        rows = self.a["rows"]
        for i, row in enumerate(rows):
            self.assertEqual(row["num_cached_tokens"], 0)
            self.assertSameOutput(row, i)
        self.assertEqual(self.a["kvtier"]["store_chunks_put"], 2 * len(self.prompts))
        self.assertEqual(self.a["kvtier"]["store_put_errors"], 0)

    def test_1_second_process_hits_with_identical_output(self):
        seen, waits = self.hooks.async_loads_seen, self.hooks.layer_waits
        row = self.generate(0)
        self.assertEqual(row["num_cached_tokens"], LOADABLE)
        self.assertSameOutput(row, 0)
        self.assertEqual(self.hooks.async_loads_seen, seen + 1, "the load ran asynchronously")
        # vLLM's CPU attention calls wait_for_layer_load once per layer and forward.
        self.assertGreater(self.hooks.layer_waits, waits)
        self.assertEqual((self.hooks.layer_waits - waits) % 2, 0, "2 layers per forward")
        m = self.daemon.metrics()
        hits = sum(float(v) for v in re.findall(r"^kvtier_store_hits_total(?:\{[^}]*\})? (\S+)$",
                                                m, re.M))
        self.assertGreaterEqual(hits, 2, "kvtierd's metrics count the 2 chunks served")
        # Same host, unix socket: the chunks moved through shared memory, both ways.
        shm_in = re.search(r'^kvtier_bytes_in_total\{path="shm"\} (\S+)$', m, re.M)
        shm_out = re.search(r'^kvtier_bytes_out_total\{path="shm"\} (\S+)$', m, re.M)
        self.assertGreater(float(shm_in.group(1)), 0, "puts through shared memory")
        self.assertGreater(float(shm_out.group(1)), 0, "gets through shared memory")

    def test_1b_whole_prompt_load_recomputes_only_the_last_token(self):
        before = self.worker_stats()
        row = self.generate(5)
        self.assertEqual(row["num_cached_tokens"], 512, "all 512 prompt tokens loaded")
        self.assertSameOutput(row, 5)
        self.assertEqual(self.worker_stats()["load_chunks_ok"] - before["load_chunks_ok"], 2)

    def test_2_restarted_kvtierd_serves_from_disk(self):
        self.daemon.stop()
        self.daemon.start()
        row = self.generate(1)
        self.assertEqual(row["num_cached_tokens"], LOADABLE)
        self.assertSameOutput(row, 1)

    def _failed_load(self, i, hook, after=None):
        before = self.worker_stats()
        seen = self.hooks.loads_seen
        self.hooks.before_load = hook
        try:
            row = self.generate(i)
        finally:
            self.hooks.before_load = None
            if after:
                after()
        self.assertEqual(self.hooks.loads_seen, seen + 1, "the scheduler's lookup promised a load")
        self.assertSameOutput(row, i)
        now = self.worker_stats()
        self.assertEqual(now["load_chunks_ok"], before["load_chunks_ok"])
        self.assertGreater(now["load_chunks_failed"], before["load_chunks_failed"])
        return row

    def hits_resume(self, i):
        """Hits come back once the client's cool-down after the failed calls has passed
        (4 x 250 ms from the last failure; the recomputed request's own stores may still
        fail against the dead daemon after it restarted): bounded retries, every answer
        identical."""
        for _ in range(6):
            time.sleep(1.5)
            row = self.generate(i)
            self.assertSameOutput(row, i)
            if row["num_cached_tokens"] == LOADABLE:
                return
        self.fail(f"no hit of prompt {i} within 6 tries after the daemon came back")

    def test_3_kvtierd_sigkill_between_lookup_and_load_recomputes(self):
        self._failed_load(2, lambda: self.daemon.stop(signal.SIGKILL))
        self.daemon.start()
        self.hits_resume(2)  # the restarted daemon serves A's chunk from disk again

    def stop_daemon(self):
        """SIGSTOPs kvtierd and returns once it is stopped (signals are asynchronous)."""
        self.daemon.proc.send_signal(signal.SIGSTOP)
        deadline = time.time() + 10
        while time.time() < deadline:
            with open(f"/proc/{self.daemon.proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            time.sleep(0.01)
        raise AssertionError("kvtierd did not stop within 10 s of SIGSTOP")

    def test_4_kvtierd_sigstop_between_lookup_and_load_recomputes(self):
        t0 = time.time()
        self._failed_load(3, self.stop_daemon,
                          after=lambda: self.daemon.proc.send_signal(signal.SIGCONT))
        self.assertLess(time.time() - t0, 120)
        self.hits_resume(3)  # the daemon woke up: hits again

    def test_5_corrupted_records_recompute(self):
        self.daemon.stop()
        files = glob.glob(os.path.join(self.daemon.data, "**", "rec-*.dat"), recursive=True)
        self.assertTrue(files, "kvtierd wrote record files")
        for path in files:  # one payload byte in every 4 KiB page (headers are 128 B)
            with open(path, "r+b") as f:
                size = os.path.getsize(path)
                for off in range(2048, min(size, 64 << 20), 4096):
                    f.seek(off)
                    b = f.read(1)
                    if not b:
                        break
                    f.seek(off)
                    f.write(bytes([b[0] ^ 0x5A]))
        self.daemon.start()
        time.sleep(1.5)  # past the client's cool-down, so the failure below is the data's
        before = self.worker_stats()
        self._failed_load(4, None)
        now = self.worker_stats()
        # kvtierd verifies records it reads from disk and answers a damaged one as a miss
        # (docs/disk-tier.md); a damaged record that reached the client would be DataLoss.
        self.assertGreater(now["load_misses"] + now["load_data_loss"],
                           before["load_misses"] + before["load_data_loss"])
        self.assertEqual(now["load_other_errors"], before["load_other_errors"])
        m = self.daemon.metrics()
        errors = sum(float(v) for v in re.findall(
            r'^kvtier_tier_integrity_errors_total\{tier="disk"\} (\S+)$', m, re.M))
        self.assertGreater(errors, 0, "kvtierd counts the damaged records")

    def test_6_different_block_size_gets_no_hit(self):
        out = self.f_out
        self.assertEqual(out["rows"][0]["num_cached_tokens"], 0)
        self.assertEqual(out["kvtier"]["load_chunks_ok"], 0)

    def test_6b_different_dtype_gets_no_hit(self):
        out = self.g_out
        self.assertEqual(out["rows"][0]["num_cached_tokens"], 0)
        self.assertEqual(out["kvtier"]["load_chunks_ok"], 0)
        self.assertEqual(out["kvtier"]["store_chunks_put"], 2, "G stored under its own dtype")

    def test_8_kvtier_counters_reach_vllm_prometheus_metrics(self):
        def metric(name):
            return sum(getattr(m, "value", 0) for m in self.llm.get_metrics()
                       if m.name in (name, name + "_total"))
        w = self.worker_stats()
        self.assertGreater(w["load_chunks_ok"], 0)
        self.assertEqual(metric("vllm:kvtier_load_chunks_ok"), w["load_chunks_ok"])
        self.assertEqual(metric("vllm:kvtier_load_chunks_failed"), w["load_chunks_failed"])
        self.assertGreater(metric("vllm:kvtier_load_chunks_failed"), 0)  # tests 3-5
        self.assertGreaterEqual(metric("vllm:kvtier_lookup_hit_tokens"), 4 * LOADABLE)

    def test_7_different_model_or_dtype_namespace_misses(self):
        from kvtier.vllm import _open_native
        from kvtier.vllm_config import derive_namespace, parse_extra_config
        from vllm.engine.arg_utils import EngineArgs
        cfg = parse_extra_config(self.conn_cfg)
        other = harness.tiny_model("tiny-seed1", seed=1)

        def cached(**kw):
            args = dict(model=self.model, enable_prefix_caching=False, max_model_len=2048,
                        dtype="bfloat16", enforce_eager=True)
            args.update(kw)
            vc = EngineArgs(**args).create_engine_config()
            c = _open_native(cfg, derive_namespace(vc, cfg))
            try:
                return c.lookup(self.prompts[1])[1]  # stored by A only (F ran P0)
            finally:
                c.close()
        self.assertEqual(cached(), LOADABLE)  # control: the namespace B used hits
        self.assertEqual(cached(model=other), 0)
        self.assertEqual(cached(dtype="float16"), 0)
        self.assertEqual(cached(block_size=32), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
