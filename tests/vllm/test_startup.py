"""What the vLLM connector says and checks when it starts, without running an engine
(issue 21 items 11, 13, 14): its namespace in hex for the kvtier CLI, a warning when the
configured kvtierd does not answer and one line when it does, and a bad extra-config key
refused where vLLM first shows kvtier its config (and by `python -m kvtier.vllm_config`).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import harness


def vllm_config(extra: dict):
    from vllm.config import KVTransferConfig
    from vllm.engine.arg_utils import EngineArgs
    ktc = KVTransferConfig(kv_connector="KVTierConnector", kv_connector_module_path="kvtier.vllm",
                           kv_role="kv_both", kv_connector_extra_config=extra)
    return EngineArgs(model=harness.tiny_model(), enforce_eager=True, enable_prefix_caching=False,
                      kv_transfer_config=ktc).create_engine_config()


class StartupTest(unittest.TestCase):
    def test_namespace_logged_in_hex_and_daemon_down_then_up_logged_once_each(self):
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
        from kvtier.vllm import KVTierConnector
        d = tempfile.mkdtemp(prefix="kvt-vllm-startup-")
        try:
            daemon = harness.Kvtierd(d)  # not started yet
            vc = vllm_config({"kvtierd": daemon.address, "daemon_deadline_ms": 500})
            with self.assertLogs("vllm.kvtier", level="INFO") as logs:
                conn = KVTierConnector(vc, KVConnectorRole.SCHEDULER)
                text = "\n".join(logs.output)
                self.assertRegex(conn.namespace_hex, r"^[0-9a-f]{32}$")
                self.assertIn(f"--ns {conn.namespace_hex}", text)
                self.assertEqual(text.count("does not answer"), 1, text)
                self.assertIn("vLLM runs cold", text)
                self.assertIn(daemon.address, text)
                daemon.start()
                deadline = time.time() + 20
                while time.time() < deadline and not any("answers now" in o for o in logs.output):
                    time.sleep(0.1)
                time.sleep(1.5)  # one more poll would have logged again
                text = "\n".join(logs.output)
            self.assertEqual(text.count("answers now"), 1, text)
            self.assertEqual(text.count("does not answer"), 1, text)
            conn.shutdown()
        finally:
            try:
                daemon.stop()
            finally:
                shutil.rmtree(d, ignore_errors=True)

    def test_bad_key_refused_where_vllm_builds_its_config(self):
        from kvtier.vllm import KVTierConnector
        with self.assertRaises(ValueError) as cm:
            KVTierConnector.requires_piecewise_for_cudagraph({"host_capcity": "1G"})
        self.assertIn("host_capcity", str(cm.exception))
        self.assertFalse(KVTierConnector.requires_piecewise_for_cudagraph({"chunk_tokens": 256}))

    def test_config_check_command(self):
        ktc = {"kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
               "kv_connector_extra_config": {"host_capcity": "1G"}}
        r = subprocess.run([sys.executable, "-m", "kvtier.vllm_config", json.dumps(ktc)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("kv_connector_extra_config.host_capcity: unknown key", r.stderr)
        ktc["kv_connector_extra_config"] = {"host_capacity": "4G"}
        r = subprocess.run([sys.executable, "-m", "kvtier.vllm_config", json.dumps(ktc)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["host_capacity_bytes"], 4 << 30)


if __name__ == "__main__":
    unittest.main(verbosity=2)
