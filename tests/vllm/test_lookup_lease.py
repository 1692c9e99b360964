"""The vLLM scheduler's lookup pins what it promises (issue 20): kvtier's
Connector.lookup_pinned (kvt_lookup_pinned) hands back the store's lease. While the lease
is held, the looked-up chunks survive a flood of other stores that evicts everything else
from the host tier, and load in full; once it is released, the same flood evicts them.
The vLLM connector (kvtier.vllm) holds such a lease from get_num_new_matched_tokens until
the step that loads the request has run (or the request is not scheduled / finishes).
"""

import ctypes
import unittest

from kvtier._native import Connector, ConnectorOptions

LAYERS, HEADS, HEAD_DIM, CHUNK = 2, 2, 8, 16
BLOCK = CHUNK                              # one block per chunk
BLOCK_BYTES = 2 * HEADS * HEAD_DIM * 2 * BLOCK  # k and v, bfloat16: 1024 bytes
NUM_BLOCKS = 8


class LookupLeaseTest(unittest.TestCase):
    def setUp(self):
        # A host tier of about 8 records (2 KiB payload + header each): a flood of 40
        # chunks evicts every chunk nobody pins.
        self.c = Connector(ConnectorOptions(
            model_id="lease-test", num_layers=LAYERS, num_kv_heads=HEADS, head_dim=HEAD_DIM,
            chunk_tokens=CHUNK, host_capacity_bytes=20 << 10, use_cost_model=False,
            async_store=False))
        self.layers = [(ctypes.c_uint8 * (NUM_BLOCKS * BLOCK_BYTES))() for _ in range(LAYERS)]
        self.c.register_block_view([ctypes.addressof(b) for b in self.layers], BLOCK,
                                   NUM_BLOCKS, BLOCK_BYTES)
        for layer, buf in enumerate(self.layers):
            for i in range(2 * BLOCK_BYTES):  # blocks 0 and 1: the prompt's KV
                buf[i] = (i * 7 + layer * 31) % 251
        self.prompt = list(range(1, 2 * CHUNK + 2))  # two chunks and a last token
        self.assertEqual(self.c.store_blocks(self.prompt, [0, 1]), 2)

    def tearDown(self):
        self.c.close()

    def flood(self, base, times=1):
        for k in range(20):
            tokens = [base + 100 * k + i for i in range(2 * CHUNK + 1)]
            for _ in range(times):
                self.c.store_blocks(tokens, [4, 5])
                self.c.lookup(tokens)  # used, as a served prompt is

    def block(self, layer, b):
        return bytes(self.layers[layer][b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES])

    def test_a_held_lease_keeps_the_promised_prefix_until_released(self):
        load, cached, lease = self.c.lookup_pinned(self.prompt)
        self.assertEqual((load, cached), (2 * CHUNK, 2 * CHUNK))
        self.assertIsNotNone(lease)
        self.flood(10000)
        # The promise holds: both chunks load, byte-identical to what was stored.
        self.assertEqual(self.c.load_blocks(self.prompt, 2 * CHUNK, [2, 3]), 2 * CHUNK)
        for layer in range(LAYERS):
            self.assertEqual(self.block(layer, 2), self.block(layer, 0))
            self.assertEqual(self.block(layer, 3), self.block(layer, 1))
        lease.close()
        lease.close()  # releasing twice does nothing
        # Released: the same flood evicts the prefix (the pins were what kept it).
        # Each flood prompt is stored and used 4 times: host memory's default policy
        # (adaptive) keeps a used prefix over chunks seen once, so the flood must be used
        # more than the prefix was.
        self.flood(20000, times=4)
        self.assertEqual(self.c.lookup(self.prompt)[1], 0)

    def test_nothing_to_load_gives_no_lease(self):
        load, cached, lease = self.c.lookup_pinned([90000 + i for i in range(2 * CHUNK + 1)])
        self.assertEqual((load, cached), (0, 0))
        self.assertIsNone(lease)


if __name__ == "__main__":
    unittest.main(verbosity=2)
