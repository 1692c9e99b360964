"""kvtier's KV-group handling against vLLM's own KVCacheSpec / KVCacheConfig objects,
without a forward pass: for every family kvtier.make_model writes (Gemma 3, gpt-oss,
Qwen3-Next, Qwen3.5, Granite 4 hybrid), vLLM's config for the tiny model, the per-layer
specs vLLM's layers declare for it (vLLM's spec classes; Mamba / gated-DeltaNet state
shapes from the model class's own get_mamba_state_shape_from_config), and the
KVCacheConfig vLLM's get_kv_cache_configs groups them into.

Checked: vLLM keeps its hybrid KV cache manager on with kvtier's connector (SupportsHMA);
the groups kvtier derives; a state (Mamba / linear-attention) group is handled with
vLLM's prefix caching on ("align" mode) and makes the connector run cold without it
(no lookups, no stores); a record stored under one group layout never hits under
another (a different window, a different group split, HMA on vs off, another state
layout) through a real kvtierd; a sliding-window group's load writes only the blocks
vLLM allocated for it (bytes checked), and a store is refused when a group's blocks
were already freed; a state group stores and loads exactly the state block of a chunk
boundary (bytes checked), and a load needs that state.
"""

import os
import shutil
import tempfile
import unittest

import torch

import harness
from test_hma import family_model

SWA_FAMILIES = ("gemma3", "gpt_oss")
STATE_FAMILIES = ("qwen3_next", "qwen3_5", "granite4")


def engine_config(model, hma=True, extra=None, **kw):
    from vllm.engine.arg_utils import EngineArgs
    kv = {"kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
          "kv_role": "kv_both", "kv_connector_extra_config": extra or {}}
    args = dict(model=model, max_model_len=2048, dtype="bfloat16", enforce_eager=True,
                enable_prefix_caching=False, kv_transfer_config=kv)
    if not hma:
        args["disable_hybrid_kv_cache_manager"] = True
    args.update(kw)
    vc = EngineArgs(**args).create_engine_config()
    if kw.get("enable_prefix_caching"):
        # What vLLM's executor does before the engine core starts: the hybrid models'
        # attention block size aligned to the state page (384 tokens on the Qwen
        # hybrids), and the state group's block size to it ("align" mode).
        # (update_block_size_for_backend finds the backend on the model's built layers;
        # there are none here: the CPU attention backend is named.)
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
        current_platform._align_hybrid_block_size(vc, CPUAttentionBackend)
    return vc


def layer_specs(vc) -> dict:
    """What vLLM's layers of this model declare (Attention.get_kv_cache_spec,
    MambaBase.get_kv_cache_spec), built with vLLM's classes from the model's config."""
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec
    mc, cc = vc.model_config, vc.cache_config
    hf = mc.hf_text_config
    kinds = list(hf.layer_types)
    attn = dict(block_size=cc.block_size, num_kv_heads=mc.get_num_kv_heads(vc.parallel_config),
                head_size=mc.get_head_size(), dtype=torch.bfloat16)
    specs = {}
    state = None
    for i, kind in enumerate(kinds):
        if kind in ("sliding_attention",):
            spec = SlidingWindowSpec(sliding_window=hf.sliding_window, **attn)
            specs[f"model.layers.{i}.self_attn.attn"] = spec
        elif kind in ("full_attention", "attention"):
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(**attn)
        else:  # mamba / linear_attention: a state per request
            if state is None:
                cls, _ = ModelRegistry.resolve_model_cls(mc.architectures, mc)
                state = MambaSpec(shapes=tuple(cls.get_mamba_state_shape_from_config(vc)),
                                  dtypes=tuple(cls.get_mamba_state_dtype_from_config(vc)),
                                  block_size=cc.mamba_block_size or cc.block_size,
                                  page_size_padded=cc.mamba_page_size_padded,
                                  mamba_cache_mode=cc.mamba_cache_mode)
            specs[f"model.layers.{i}.mixer"] = state
    return specs


def kv_cache_config(vc):
    """vLLM's KVCacheConfig for the model, as its engine core makes it: the KV cache
    layout resolved for the CPU attention backend, then get_kv_cache_configs."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    specs = layer_specs(vc)
    if vc.cache_config.kv_cache_layout is None:
        names = [x.name for x in get_supported_kv_cache_layouts([CPUAttentionBackend])]
        resolve_kv_cache_layout(vc, [names], list(specs.values()))
    return get_kv_cache_configs(vc, [specs], [256 << 20])[0]


def connector(vc, kcc, role):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from kvtier.vllm import KVTierConnector
    r = KVConnectorRole.SCHEDULER if role == "scheduler" else KVConnectorRole.WORKER
    return KVTierConnector(vc, r, kcc)


class _Req:
    def __init__(self, rid, tokens):
        self.request_id = rid
        self.prompt_token_ids = tokens


class HmaGroupsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-vllm-hma-groups-")
        cls.models = {f: family_model(f) for f in SWA_FAMILIES + STATE_FAMILIES}
        cls.daemon = harness.Kvtierd(cls.dir).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_vllm_keeps_hma_on_and_kvtier_reads_the_groups(self):
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from kvtier.vllm_config import kv_groups
        want = {"gemma3": ["sliding_window"] * 3 + ["full"],
                "gpt_oss": ["sliding_window", "full"]}
        for fam in SWA_FAMILIES + STATE_FAMILIES:
            with self.subTest(family=fam):
                vc = engine_config(self.models[fam])
                self.assertTrue(KVConnectorFactory.supports_hma_config(vc.kv_transfer_config))
                self.assertFalse(vc.scheduler_config.disable_hybrid_kv_cache_manager,
                                 "vLLM turned its hybrid KV cache manager off")
                groups = kv_groups(kv_cache_config(vc))
                kinds = sorted(g.kind for g in groups)
                if fam in want:
                    self.assertEqual(kinds, sorted(want[fam]))
                else:
                    self.assertIn("unsupported", kinds, "the state group")
                    self.assertIn("full", kinds)

    def test_state_groups_with_prefix_caching(self):
        """With vLLM's prefix caching on, Qwen3.5 / Qwen3-Next's linear-attention group is
        a "state" group in vLLM's align mode, with the attention group's block size;
        kvtier's chunk_tokens follows it when unset and must fit it when set."""
        for fam in ("qwen3_next", "qwen3_5"):
            with self.subTest(family=fam):
                vc = engine_config(self.models[fam], enable_prefix_caching=True,
                                   extra={"host_capacity": "16MiB"})
                self.assertEqual(vc.cache_config.mamba_cache_mode, "align")
                kcc = kv_cache_config(vc)
                from kvtier.vllm_config import kv_groups
                groups = kv_groups(kcc)
                self.assertEqual(sorted(g.kind for g in groups), ["full", "state"])
                st = [g for g in groups if g.kind == "state"][0]
                self.assertEqual(st.block_size, vc.cache_config.block_size)
                self.assertGreater(st.page_bytes, 0)
                c = connector(vc, kcc, "scheduler")
                try:
                    self.assertFalse(c._inert)
                    self.assertEqual(c._cfg.chunk_tokens % st.block_size, 0)
                    self.assertGreaterEqual(c._cfg.chunk_tokens, 256)
                finally:
                    c.shutdown()
                vc = engine_config(self.models[fam], enable_prefix_caching=True,
                                   extra={"host_capacity": "16MiB", "chunk_tokens": 256})
                with self.assertRaisesRegex(ValueError, "chunk_tokens = 256.*multiple of"):
                    connector(vc, kv_cache_config(vc), "scheduler")

    def test_state_groups_without_prefix_caching_run_cold(self):
        for fam in STATE_FAMILIES:
            with self.subTest(family=fam):
                vc = engine_config(self.models[fam], extra={"host_capacity": "16MiB"})
                c = connector(vc, kv_cache_config(vc), "scheduler")
                try:
                    self.assertTrue(c._inert)
                    req = _Req("r", harness.prompt(1, 700))
                    self.assertEqual(c.get_num_new_matched_tokens(req, 0), (0, False))
                    self.assertEqual(c.request_finished_all_groups(req, ([1, 2], [3])),
                                     (False, None))
                finally:
                    c.shutdown()

    def test_layouts_never_share_records(self):
        """A prompt stored under Gemma 3's HMA layout (window 256, 3 sliding + 1 full)
        hits there and nowhere else: HMA off, window 512, another split."""
        base = self.models["gemma3"]
        other_window = family_model("gemma3", "hma-gemma3-w512", sliding_window=512)
        # Same weights' shapes, a different split: 2 sliding + 2 full layers.
        other_split = family_model("gemma3", "hma-gemma3-split", layer_types=[
            "sliding_attention", "full_attention", "sliding_attention", "full_attention"])
        tokens = harness.prompt(7, 700)
        vc = engine_config(base, extra={"kvtierd": self.daemon.address,
                                        "use_cost_model": False, "model_id": "gemma3-tiny"})
        kcc = kv_cache_config(vc)
        w = connector(vc, kcc, "worker")
        try:
            caches = {}
            for g in kcc.kv_cache_groups:
                for n in g.layer_names:
                    s = g.kv_cache_spec
                    caches[n] = torch.randn(16, s.num_kv_heads, s.block_size,
                                            2 * s.head_size).to(torch.bfloat16)
            w.register_kv_caches(caches)
            lists = [[1, 2, 3, 4, 5, 6] for _ in kcc.kv_cache_groups]
            self.assertTrue(w._native.store(tokens, lists))
            w.flush()
        finally:
            w.shutdown()

        def cached(model, hma=True):
            v = engine_config(model, hma=hma, extra={"kvtierd": self.daemon.address,
                                                     "use_cost_model": False,
                                                     "model_id": "gemma3-tiny"})
            c = connector(v, kv_cache_config(v), "scheduler")
            try:
                return c._native.lookup(tokens)[1], c.namespace_hex
            finally:
                c.shutdown()
        hit, ns_on = cached(base)
        self.assertEqual(hit, 512, "control: the layout that stored hits")
        seen = {ns_on}
        for name, model, hma in (("HMA off", base, False), ("window 512", other_window, True),
                                 ("2+2 split", other_split, True)):
            with self.subTest(layout=name):
                hit, ns = cached(model, hma)
                self.assertEqual(hit, 0)
                self.assertNotIn(ns, seen)
                seen.add(ns)

    def test_sliding_window_load_writes_only_the_blocks_vllm_keeps(self):
        vc = engine_config(self.models["gemma3"], extra={"host_capacity": "32MiB",
                                                         "use_cost_model": False})
        kcc = kv_cache_config(vc)
        w = connector(vc, kcc, "worker")
        try:
            caches = {}
            for g in kcc.kv_cache_groups:
                for n in g.layer_names:
                    s = g.kv_cache_spec
                    caches[n] = torch.randn(16, s.num_kv_heads, s.block_size,
                                            2 * s.head_size).to(torch.bfloat16)
            w.register_kv_caches(caches)
            tokens = harness.prompt(9, 700)
            src = [[1, 2, 3, 4, 5, 6] for _ in kcc.kv_cache_groups]
            self.assertTrue(w._native.store(tokens, src))
            w.flush()
            # vLLM's lists for a 512-token load: a sliding-window group (window 256)
            # holds null blocks for tokens 0..255 (SlidingWindowManager frees them).
            swa = [g.kind == "sliding_window" for g in w._groups]
            dst = [[0, 0, 9, 10] if s else [7, 8, 9, 10] for s in swa]
            before = {n: t.clone() for n, t in caches.items()}
            self.assertEqual(w._native.load(tokens, 512, dst, 0), 512)
            for g, s in zip(kcc.kv_cache_groups, swa):
                for n in g.layer_names:
                    t, old = caches[n], before[n]
                    self.assertTrue(torch.equal(t[0], old[0]), "the null block is never written")
                    if s:
                        self.assertTrue(torch.equal(t[9], old[3]) and torch.equal(t[10], old[4]))
                        self.assertTrue(torch.equal(t[7], old[7]) and torch.equal(t[8], old[8]),
                                        "blocks outside the window are not written")
                    else:
                        for d, sb in zip((7, 8, 9, 10), (1, 2, 3, 4)):
                            self.assertTrue(torch.equal(t[d], old[sb]))
            # A sliding-window list with a null block after a real one (not a window vLLM
            # would keep): no load.
            bad = [[0, 11, 0, 10] if s else [7, 8, 9, 10] for s in swa]
            self.assertEqual(w._native.load(tokens, 512, bad, 0), 0)
            # A store whose sliding-window blocks were already freed stores nothing.
            freed = [[0, 0, 3, 4, 5, 6] if s else [1, 2, 3, 4, 5, 6] for s in swa]
            other = harness.prompt(10, 700)
            self.assertFalse(w._native.store(other, freed))
            self.assertEqual(w._native.lookup(other)[1], 0)
        finally:
            w.shutdown()


    def _state_worker(self, model, extra, kcc=None):
        vc = engine_config(model, enable_prefix_caching=True, extra=extra)
        kcc = kcc or kv_cache_config(vc)
        w = connector(vc, kcc, "worker")
        caches = {}
        for g in kcc.kv_cache_groups:
            s = g.kv_cache_spec
            for n in g.layer_names:
                if hasattr(s, "shapes"):  # vLLM's CPU runner: one int8 page per block
                    raw = torch.randint(-128, 127, (16, s.page_size_bytes), dtype=torch.int8)
                    caches[n] = raw
                else:
                    caches[n] = torch.randn(16, s.num_kv_heads, s.block_size,
                                            2 * s.head_size).to(torch.bfloat16)
        w.register_kv_caches(caches)
        return w, kcc, caches

    def test_state_group_stores_and_loads_the_boundary_state(self):
        """A load of k chunks writes the attention blocks of chunks 1..k and the state
        stored for chunk k's boundary into block k*C/B - 1 of the state group's list
        (the block vLLM reads the state of a request with k*C computed tokens from), and
        nothing else of the state group; no state stored at that boundary: no load."""
        w, kcc, caches = self._state_worker(self.models["qwen3_5"], {
            "host_capacity": "32MiB", "use_cost_model": False})
        try:
            gs = w._native
            st = gs.state_groups[0]
            C = gs.chunk_tokens
            B = w._groups[st].block_size
            self.assertEqual(C, B)
            tokens = harness.prompt(11, 3 * C + 50)
            lists = [[1, 2, 3, 4] for _ in w._groups]
            lists[st] = [0, 0, 5, 6]  # vLLM's list after one step of 3 blocks
            self.assertTrue(gs.store(tokens, lists))
            self.assertEqual(gs.lookup(tokens)[0], 0, "no state stored yet: no load")
            self.assertEqual(gs.store_state(st, tokens, 3 * C, 5), 1)
            with self.assertRaises(ValueError):
                gs.store_state(st, tokens, C + 1, 5)
            w.flush()
            self.assertEqual(gs.lookup(tokens), (3 * C, 3 * C))
            self.assertEqual(gs.lookup(tokens[:3 * C]), (0, 0), "the last token is computed")
            before = {n: t.clone() for n, t in caches.items()}
            dst = [[7, 8, 9, 10] for _ in w._groups]
            dst[st] = [0, 0, 11, 12]
            self.assertEqual(gs.load(tokens, 3 * C, dst, 0), 3 * C)
            for g in kcc.kv_cache_groups:
                for n in g.layer_names:
                    t, old = caches[n], before[n]
                    if n in w._groups[st].layer_names:
                        self.assertTrue(torch.equal(t[11], old[5]), "the boundary state")
                        for b in (0, 7, 8, 9, 10, 12):
                            self.assertTrue(torch.equal(t[b], old[b]), f"block {b} untouched")
                    else:
                        for d, sb in zip((7, 8, 9), (1, 2, 3)):
                            self.assertTrue(torch.equal(t[d], old[sb]))
            # A list without a real block at the boundary: refused, nothing written.
            bad = [list(x) for x in dst]
            bad[st] = [0, 0, 0, 12]
            self.assertEqual(gs.load(tokens, 3 * C, bad, 0), 0)
            # Another prompt sharing 2 chunks: its attention chunks 1..2 are held, the
            # state after 2 chunks is not: no load.
            other = tokens[:2 * C] + harness.prompt(12, C + 50)
            self.assertEqual(gs.lookup(other)[0], 0)
        finally:
            w.shutdown()

    def test_another_state_layout_never_hits(self):
        """A prompt stored under Qwen3.5's layout hits there, not under the same model
        with another linear-attention state (conv kernel 3: other state shapes)."""
        other = family_model("qwen3_5", "hma-qwen3_5-conv3", linear_conv_kernel_dim=3)
        extra = {"kvtierd": self.daemon.address, "use_cost_model": False,
                 "model_id": "qwen3_5-tiny"}
        w, _, _ = self._state_worker(self.models["qwen3_5"], extra)
        tokens = harness.prompt(13, 1200)
        try:
            gs = w._native
            st = gs.state_groups[0]
            C = gs.chunk_tokens
            lists = [[1, 2, 3] for _ in w._groups]
            lists[st] = [0, 0, 4]
            self.assertTrue(gs.store(tokens, lists))
            self.assertEqual(gs.store_state(st, tokens, 3 * C, 4), 1)
            w.flush()
        finally:
            w.shutdown()

        def lookup(model):
            vc = engine_config(model, enable_prefix_caching=True, extra=extra)
            c = connector(vc, kv_cache_config(vc), "scheduler")
            try:
                return c._native.lookup(tokens)[1], c.namespace_hex
            finally:
                c.shutdown()
        hit, ns = lookup(self.models["qwen3_5"])
        self.assertEqual(hit, 3 * C, "control: the layout that stored hits")
        hit2, ns2 = lookup(other)
        self.assertEqual(hit2, 0)
        self.assertNotEqual(ns, ns2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
