"""Byte sizes mean the same in the vLLM connector as in kvtierd and the kvtier CLI (issue
21 item 4): kvtier.parse_byte_size is the C++ parser (kvt_parse_byte_size), and the
connector's host_capacity / disk_capacity go through it. Every line of
tests/connector/byte_sizes.txt (which tests/connector/c_api_test.c checks against the C
ABI) is read here too, so both sides are given the same strings and must agree.
"""

import os
import unittest

import kvtier
from kvtier.vllm_config import parse_extra_config

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "connector",
                     "byte_sizes.txt")


def rows():
    with open(TABLE) as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line.startswith("#") or "\t" not in line:
                continue
            text, want = line.split("\t", 1)
            yield text, None if want == "error" else int(want)


class ByteSizeTest(unittest.TestCase):
    def test_same_strings_same_bytes_as_the_cpp_parser(self):
        n = 0
        for text, want in rows():
            n += 1
            with self.subTest(text=text):
                if want is None:
                    with self.assertRaises(ValueError) as cm:
                        kvtier.parse_byte_size(text)
                    # The C++ parser's own message, naming the text.
                    self.assertIn(f"byte size '{text}'", str(cm.exception))
                else:
                    self.assertEqual(kvtier.parse_byte_size(text), want)
        self.assertGreaterEqual(n, 20)

    def test_connector_capacities_use_the_same_parser(self):
        self.assertEqual(parse_extra_config({"host_capacity": "4G"}).host_capacity_bytes,
                         4 << 30)
        self.assertEqual(parse_extra_config({"disk_dir": "/tmp/d", "disk_capacity": "4GB"})
                         .disk_capacity_bytes, 4 * 10**9)
        for text, want in rows():
            with self.subTest(text=text):
                if want is None:
                    with self.assertRaises(ValueError) as cm:
                        parse_extra_config({"disk_dir": "/tmp/d", "disk_capacity": text})
                    self.assertIn("disk_capacity", str(cm.exception))
                else:
                    c = parse_extra_config({"disk_dir": "/tmp/d", "disk_capacity": text})
                    # 0 means the default size (kvtierd's), not an empty tier.
                    self.assertEqual(c.disk_capacity_bytes, want or 8 << 30)
        self.assertEqual(parse_extra_config({"disk_dir": "/tmp/d"}).disk_capacity_bytes, 8 << 30)
        self.assertEqual(parse_extra_config({"disk_dir": "/tmp/d", "disk_capacity": 0})
                         .disk_capacity_bytes, 8 << 30)
        # A fraction of a byte is refused, not dropped (was 1000 bytes).
        with self.assertRaises(ValueError):
            parse_extra_config({"host_capacity": "1.0000001K"})

    def test_python_has_no_parser_of_its_own(self):
        import kvtier.vllm_config as vc
        self.assertFalse(hasattr(vc, "parse_bytes"))
        self.assertFalse(hasattr(vc, "_UNITS"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
