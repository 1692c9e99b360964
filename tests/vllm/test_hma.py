"""kvtier under vLLM's hybrid KV cache manager (HMA), for real, on a sliding-window
family that vLLM runs on these CPUs: Gemma 3 here (tiny random weights,
kvtier.make_model --family gemma3: 3 sliding-window layers with a 256-token window, 1
full-attention layer; vLLM makes 4 KV groups of 1 layer, block size 128);
test_hma_gpt_oss runs the same cases on gpt-oss (HmaFamilyCases).

Engine processes, shared by every case (engine start is the cost here):
  reference  no connector, vLLM's own prefix cache: each prompt cold and with vLLM's
             prefix cache holding exactly its first 512 tokens (the reference for a
             kvtier load of 512 tokens, docs/vllm.md "Exactness")
  A          kvtierd connector: computes the prompts and stores them (every group)
  E1 -> E2   embedded host + disk store: E1 stores, E2 (a fresh process) loads from disk
  B          this process (in-process engine), kvtierd connector (hooked_connector's
             KVTierConnector with test hooks): loads A's chunks

Prompts are 700 tokens: 2 complete 256-token chunks = 512 loadable. At 512 tokens a
256-token window keeps the blocks of tokens 256..511 only, so a sliding-window group
loads one chunk (its window) and a full group two.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

import harness

PROMPT_TOKENS = 700
LOADABLE = 512


def family_model(family, name=None, **overrides):
    from kvtier.make_model import make_family_model
    return make_family_model(os.path.join(harness.CACHE, name or f"hma-{family}"), family,
                             **overrides)


class HmaFamilyCases:
    """The cases, for the family FAMILY whose groups vLLM makes are KINDS (sorted)."""
    FAMILY = ""
    KINDS: list = []

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-vllm-hma-")
        cls.model = family_model(cls.FAMILY)
        cls.prompts = [harness.prompt(40 + i, PROMPT_TOKENS) for i in range(3)]
        # P3: stored by B, then its sliding-window records are evicted (test_3).
        cls.p3 = harness.prompt(50, PROMPT_TOKENS)
        cls.daemon = harness.Kvtierd(cls.dir).start()
        cls.conn = {"kvtierd": cls.daemon.address, "use_cost_model": False,
                    "daemon_deadline_ms": 2000, "tenant": "hma"}
        cls.emb = {"disk_dir": os.path.join(cls.dir, "disk"), "host_capacity": "64MiB",
                   "disk_capacity": "256MiB", "use_cost_model": False}
        base = dict(model=cls.model, prompts=cls.prompts)
        ref = harness.run_engine(dict(base, connector=None, prefix_hit_tokens=LOADABLE,
                                      prompts=cls.prompts + [cls.p3]), cls.dir, "reference")
        a = harness.run_engine(dict(base, connector=cls.conn), cls.dir, "A")
        e1 = harness.run_engine(dict(base, connector=cls.emb), cls.dir, "E1")
        cls.a = harness.engine_result(a)
        cls.e1 = harness.engine_result(e1)
        out = harness.engine_result(ref)
        cls.ref, cls.ref_hit = out["rows"], out["hit_rows"]
        # E2 loads from E1's disk tier while this process starts its own engine.
        cls.e2_proc = harness.run_engine(dict(base, connector=cls.emb), cls.dir, "E2")
        from vllm import LLM
        cls.llm = LLM(model=cls.model, enable_prefix_caching=False, max_model_len=2048,
                      dtype="bfloat16", enforce_eager=True, seed=0,
                      kv_transfer_config={"kv_connector": "HookedKVTierConnector",
                                          "kv_connector_module_path": "hooked_connector",
                                          "kv_role": "kv_both",
                                          "kv_connector_extra_config": cls.conn})
        cls.e2 = harness.engine_result(cls.e2_proc)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def worker(self):
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        return get_kv_transfer_group()

    def assertExact(self, row, i, ref_rows=None, hit_rows=None):
        """A request that loaded LOADABLE tokens against vLLM's own prefix-cache hit on
        those tokens; one that loaded nothing against the cold run."""
        ref_rows, hit_rows = ref_rows or self.ref, hit_rows or self.ref_hit
        ref = hit_rows[i] if row["num_cached_tokens"] == LOADABLE else ref_rows[i]
        self.assertEqual(row["token_ids"], ref["token_ids"])
        self.assertEqual(row["logprobs"], ref["logprobs"])

    def test_0_layout_is_hybrid_and_groups_have_their_own_namespaces(self):
        conn = self.worker()
        kinds = [g.kind for g in conn._groups]
        self.assertEqual(sorted(kinds), self.KINDS, "vLLM ran the model with HMA on")
        self.assertEqual({g.window for g in conn._groups if g.kind == "sliding_window"}, {256})
        ns = conn.namespace_hex.split(",")
        self.assertEqual(len(set(ns)), len(self.KINDS), "one namespace per group")

    def test_1_first_process_stores_every_group(self):
        for i, row in enumerate(self.a["rows"]):
            self.assertEqual(row["num_cached_tokens"], 0)
            self.assertExact(row, i)
        # 2 chunks per prompt, in each group.
        self.assertEqual(self.a["kvtier"]["store_chunks_put"],
                         2 * len(self.KINDS) * len(self.prompts))
        self.assertEqual(self.a["kvtier"]["store_put_errors"], 0)

    def test_2_second_process_loads_through_kvtierd_exactly(self):
        conn = self.worker()
        before = [n.stats()["load_chunks_ok"] for n in conn._native.natives]
        for i in range(len(self.prompts)):
            row = harness.generate(self.llm, [self.prompts[i]])[0]
            self.assertEqual(row["num_cached_tokens"], LOADABLE, f"prompt {i}")
            self.assertExact(row, i)
        got = [n.stats()["load_chunks_ok"] - b for n, b in zip(conn._native.natives, before)]
        # A sliding-window group loads only its window's chunk (tokens 256..511: vLLM
        # keeps blocks 2 and 3 of 128 tokens); the full group both chunks.
        for g, n in zip(conn._groups, got):
            want = 1 if g.kind == "sliding_window" else 2
            self.assertEqual(n, want * len(self.prompts), f"group {g.index} ({g.kind})")

    def test_3_missing_window_records_recompute(self):
        conn = self.worker()
        row = harness.generate(self.llm, [self.p3])[0]  # computes and stores P3
        self.assertEqual(row["num_cached_tokens"], 0)
        self.assertExact(row, 3)
        conn.flush()
        swa = [g for g in conn._groups if g.kind == "sliding_window"][0]
        ns = conn._native.natives[swa.index].namespace_hex()
        tokens = os.path.join(self.dir, "p3.tokens")
        with open(tokens, "w") as f:
            json.dump(self.p3, f)
        cli = os.path.join(os.path.dirname(os.environ["KVTIERD"]), "cli", "kvtier")
        r = subprocess.run([cli, "--daemon", self.daemon.address, "evict", "--prefix", tokens,
                            "--ns", ns], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # Every other group still holds both chunks; this group holds none: the request
        # recomputes (nothing loaded, cold output), it does not load a partial window.
        row = harness.generate(self.llm, [self.p3])[0]
        self.assertEqual(row["num_cached_tokens"], 0)
        self.assertExact(row, 3)

    def test_4_embedded_store_after_restart_loads_exactly(self):
        for i, row in enumerate(self.e1["rows"]):
            self.assertEqual(row["num_cached_tokens"], 0)
            self.assertExact(row, i)
        for i, row in enumerate(self.e2["rows"]):
            self.assertEqual(row["num_cached_tokens"], LOADABLE, f"prompt {i}")
            self.assertExact(row, i)
        self.assertTrue(os.path.isdir(os.path.join(self.emb["disk_dir"], "kv-group-0")))

    def test_5_failed_load_recomputes_the_request(self):
        """kvtierd SIGKILLed between the lookup and the load: the groups' load fails, the
        request is reported in failed_recving (block ids are per group) and vLLM
        recomputes it: cold output, nothing counted as loaded, no hang."""
        conn = self.worker()
        before = conn.kvtier_stats()
        type(conn).before_load = lambda: self.daemon.stop(signal.SIGKILL)
        try:
            row = harness.generate(self.llm, [self.prompts[0]])[0]
        finally:
            type(conn).before_load = None
            self.daemon.start()
        self.assertEqual(row["num_cached_tokens"], 0)
        self.assertEqual(row["token_ids"], self.ref[0]["token_ids"])
        self.assertEqual(row["logprobs"], self.ref[0]["logprobs"])
        now = conn.kvtier_stats()
        self.assertGreater(now["load_chunks_failed"], before["load_chunks_failed"])
        self.assertEqual(now["load_chunks_ok"], before["load_chunks_ok"])


class HmaGemma3Test(HmaFamilyCases, unittest.TestCase):
    FAMILY = "gemma3"
    KINDS = ["full", "sliding_window", "sliding_window", "sliding_window"]


if __name__ == "__main__":
    unittest.main(verbosity=2)
