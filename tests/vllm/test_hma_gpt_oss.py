"""test_hma's cases on gpt-oss (tiny random weights, kvtier.make_model --family gpt_oss:
a sliding-window layer with a 256-token window and a full-attention layer, MoE; vLLM
makes 2 KV groups of 1 layer, block size 128): stored by one engine, loaded by another
through kvtierd and from the embedded store after a restart, identical to vLLM's own
prefix-cache hit; the sliding-window group loads only its window; missing window
records recompute."""

import unittest

from test_hma import HmaFamilyCases


class HmaGptOssTest(HmaFamilyCases, unittest.TestCase):
    FAMILY = "gpt_oss"
    KINDS = ["full", "sliding_window"]


if __name__ == "__main__":
    unittest.main(verbosity=2)
