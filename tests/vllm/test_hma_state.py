"""State-space / linear-attention hybrids under vLLM's hybrid KV cache manager, for real,
tiny random weights (kvtier.make_model --family ...):

Qwen3.5 and Qwen3-Next (gated-DeltaNet linear attention + full attention) with vLLM's
prefix caching on, so that vLLM keeps the linear-attention states at block boundaries
("align" mode; blocks of 384 tokens on these models): kvtier stores a prompt's chunks
(full-attention group) and the states vLLM kept at chunk boundaries (state group), and
another engine loads them. Per family, engine processes run in two waves:
  reference  no connector: each prompt cold, and with vLLM's own prefix cache holding
             exactly its first 1152 tokens (docs/vllm.md, "Exactness")
  A          kvtierd connector: computes the prompts and stores them
  E1         embedded host + disk store: computes and stores
  B          a fresh engine, kvtierd connector: loads A's records
  E2         a fresh engine on E1's disk directory (a restart): loads E1's records
Prompts of 1200 tokens: vLLM computes 1152 (3 blocks) in the first step and keeps the
state after 1152 tokens; kvtier's chunks are 384 tokens, so 3 chunks + that state load.
B and E2 also run a 1000-token prompt sharing the first 800 tokens of the first one:
kvtier holds its first 2 chunks but not the state after them (vLLM never kept it), so
it loads nothing and computes the prompt cold.

Granite 4 hybrid (Mamba2 + attention) is run cold: vLLM 0.32's CPU Mamba2 path fails
with prefix caching on, and without it vLLM keeps no state kvtier could store (its
Mamba group is in "none" mode): kvtier looks nothing up and stores nothing, and the
output is vLLM's own without a connector.
"""

import os
import shutil
import tempfile
import unittest

import harness
from test_hma import family_model

FAMILIES = ("qwen3_5", "qwen3_next")
PROMPT_TOKENS = 1200
LOADABLE = 1152  # 3 chunks of 384 tokens, and the state after them


class HmaStateFamiliesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-vllm-hma-state-")
        cls.daemon = harness.Kvtierd(cls.dir).start()
        cls.prompts = [harness.prompt(80 + i, PROMPT_TOKENS) for i in range(2)]
        cls.no_state = cls.prompts[0][:800] + harness.prompt(90, 200)
        loaders = cls.prompts + [cls.no_state]
        cls.out = {}
        for fam in FAMILIES:
            d = os.path.join(cls.dir, fam)
            os.makedirs(d)
            conn = {"kvtierd": cls.daemon.address, "use_cost_model": False,
                    "tenant": f"state-{fam}"}
            emb = {"disk_dir": os.path.join(d, "disk"), "host_capacity": "32MiB",
                   "disk_capacity": "256MiB", "use_cost_model": False}
            base = dict(model=family_model(fam), prompts=cls.prompts, prefix_caching=True)
            ref = harness.run_engine(dict(base, connector=None, prefix_hit_tokens=LOADABLE,
                                          prompts=loaders), d, "reference")
            a = harness.run_engine(dict(base, connector=conn), d, "A")
            e1 = harness.run_engine(dict(base, connector=emb), d, "E1")
            r = {"A": harness.engine_result(a), "E1": harness.engine_result(e1)}
            b = harness.run_engine(dict(base, connector=conn, prompts=loaders), d, "B")
            e2 = harness.run_engine(dict(base, connector=emb, prompts=loaders), d, "E2")
            r["reference"] = harness.engine_result(ref)
            r["B"] = harness.engine_result(b)
            r["E2"] = harness.engine_result(e2)
            cls.out[fam] = r
        # Granite 4 hybrid: with and without the connector, prefix caching off.
        spec = dict(model=family_model("granite4"), prompts=[cls.prompts[0]] * 2)
        r = harness.run_engine(dict(spec, connector=None), cls.dir, "granite4-ref")
        k = harness.run_engine(dict(spec, connector={"host_capacity": "16MiB"}), cls.dir,
                               "granite4-kvtier")
        cls.granite = (harness.engine_result(r), harness.engine_result(k))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def assertSame(self, row, ref):
        self.assertEqual(row["token_ids"], ref["token_ids"])
        self.assertEqual(row["logprobs"], ref["logprobs"])

    def test_storing_engines_compute_cold_and_store_chunks_and_states(self):
        for fam in FAMILIES:
            for name in ("A", "E1"):
                with self.subTest(family=fam, engine=name):
                    r, ref = self.out[fam][name], self.out[fam]["reference"]
                    for i, row in enumerate(r["rows"]):
                        self.assertEqual(row["num_cached_tokens"], 0)
                        self.assertSame(row, ref["rows"][i])
                    # Per prompt: 3 chunks of the attention group + 1 state record.
                    self.assertEqual(r["kvtier"]["store_chunks_taken"], 4 * len(self.prompts))

    def assertLoads(self, fam, name):
        r, ref = self.out[fam][name], self.out[fam]["reference"]
        n = len(self.prompts)
        for i, row in enumerate(r["rows"][:n]):
            self.assertEqual(row["num_cached_tokens"], LOADABLE, f"prompt {i}")
            self.assertSame(row, ref["hit_rows"][i])
        # 3 chunks + 1 state per prompt; nothing for the prompt without its state.
        self.assertEqual(r["kvtier"]["load_chunks_ok"], 4 * n)
        self.assertEqual(r["kvtier"]["load_chunks_failed"], 0)
        row = r["rows"][n]
        self.assertEqual(row["num_cached_tokens"], 0, "no state after its 2 held chunks")
        self.assertSame(row, ref["rows"][n])

    def test_load_through_kvtierd_is_vllms_own_prefix_hit(self):
        for fam in FAMILIES:
            with self.subTest(family=fam):
                self.assertLoads(fam, "B")

    def test_load_from_embedded_store_after_restart(self):
        for fam in FAMILIES:
            with self.subTest(family=fam):
                self.assertLoads(fam, "E2")

    def test_granite4_runs_cold_and_exact_with_kvtier(self):
        ref, kv = self.granite
        for r, k in zip(ref["rows"], kv["rows"]):
            self.assertEqual(k["num_cached_tokens"], 0)
            self.assertSame(k, r)
        self.assertEqual(kv["kvtier"]["lookups"], 0)
        self.assertEqual(kv["kvtier"]["store_chunks_taken"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
