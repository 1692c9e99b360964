"""State-space / linear-attention hybrids under vLLM's hybrid KV cache manager, for real:
Qwen3.5 and Qwen3-Next (gated-DeltaNet linear attention + full attention) and Granite 4
hybrid (Mamba2 + attention), tiny random weights (kvtier.make_model --family ...), all of
which vLLM 0.32 runs on these CPUs. kvtier does not store or load a state group (see
docs/vllm.md, "Hybrid models"): with kvtier's connector such a model starts (vLLM keeps
HMA on: a connector without SupportsHMA cannot run these models at all), computes every
prompt cold, looks nothing up and stores nothing, and its output is vLLM's own without a
connector (greedy tokens and logprobs identical). Two processes per family, one with
and one without the connector, side by side.
"""

import shutil
import tempfile
import unittest

import harness
from test_hma import family_model

FAMILIES = ("qwen3_5", "qwen3_next", "granite4")


class HmaStateFamiliesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-vllm-hma-state-")
        p = harness.prompt(60, 700)
        cls.prompts = [p, p]  # the repeat would hit if anything were stored
        cls.out = {}
        for fam in FAMILIES:  # two engines at a time (memory)
            spec = dict(model=family_model(fam), prompts=cls.prompts)
            r = harness.run_engine(dict(spec, connector=None), cls.dir, f"{fam}-ref")
            k = harness.run_engine(dict(spec, connector={"host_capacity": "16MiB"}), cls.dir,
                                   f"{fam}-kvtier")
            cls.out[fam] = (harness.engine_result(r), harness.engine_result(k))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_state_families_run_cold_and_exact_with_kvtier(self):
        for fam in FAMILIES:
            with self.subTest(family=fam):
                ref, kv = self.out[fam]
                for r, k in zip(ref["rows"], kv["rows"]):
                    self.assertEqual(k["num_cached_tokens"], 0)
                    self.assertEqual(k["token_ids"], r["token_ids"])
                    self.assertEqual(k["logprobs"], r["logprobs"])
                self.assertEqual(kv["kvtier"]["lookups"], 0)
                self.assertEqual(kv["kvtier"]["store_chunks_taken"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
