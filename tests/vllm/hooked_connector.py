"""KVTierConnector with test hooks:
  * before_load: run right before the worker loads (after the scheduler's lookup of the
    same step): lets a test kill or stop kvtierd in between;
  * counters of the loads (sync / async) and of vLLM's per-layer wait_for_layer_load calls;
  * $KVT_TEST_STORE_DELAY_S: the store thread sleeps this long before it copies a
    request's blocks (a slow store), so a test can check that vLLM does not reuse the
    blocks of a finished request until its store copied them;
  * per-layer sync loads: layer_releases lists [layer, layers written] each time vLLM's
    forward got a layer from wait_for_layer_load; $KVT_TEST_HOLD_LAYERS=1 makes the load
    thread write layer l only after the forward got layer l-1, so "layer 0 released
    while layer 1 is not written yet" is a fact of the order, not of timing;
    $KVT_TEST_FAIL_LAYER_LOAD=N: the N-th per-layer load (1-based) fails writing layer 1
    (layer 0 written), as a failed copy would; failed_blocks sums
    get_block_ids_with_load_errors;
  * $KVT_TEST_BREAK_DELAYED_FREE=1: request_finished lets vLLM free the blocks at once
    (and the worker never reports finished_sending): the bug that test must catch. Used
    only to check by hand that the test fails without kvtier's delayed free;
  * $KVT_TEST_BREAK_PREEMPT_WAIT=1: handle_preemptions does not wait for the stores of
    preempted requests (by hand, test_layers must then fail)."""

import os
import threading
import time

from kvtier.vllm import KVTierConnector


class HookedKVTierConnector(KVTierConnector):
    before_load = None  # callable(), set by the test; called once per step that loads
    loads_seen = 0
    async_loads_seen = 0
    layer_waits = 0
    layer_releases = []  # [layer index, layers written] per released layer
    layered_started = 0
    failed_blocks = 0
    preempted_store_waits = 0  # preempted requests whose store was still copying

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        loads = [r for r in meta.requests if r.load_tokens > 0]
        if loads:
            type(self).loads_seen += 1
            type(self).async_loads_seen += sum(r.async_load for r in loads)
            hook = type(self).before_load
            if hook is not None:
                type(self).before_load = None
                hook()
        return super().start_load_kv(forward_context, **kwargs)

    def wait_for_layer_load(self, layer_name):
        type(self).layer_waits += 1
        job = self._layered
        r = super().wait_for_layer_load(layer_name)
        if job is not None:
            i = self._layer_of[layer_name]
            type(self).layer_releases.append([i, job.scattered])  # no lock: the writer may hold it
            job.released[i].set()
        return r

    def _run_layered(self, job):
        job.released = [threading.Event() for _ in range(job.num_layers)]
        type(self).layered_started += 1
        job.fail_at = (1 if os.environ.get("KVT_TEST_FAIL_LAYER_LOAD") ==
                       str(type(self).layered_started) else None)
        return super()._run_layered(job)

    def _scatter_layer(self, job, fetched, layer):
        if layer > 0 and os.environ.get("KVT_TEST_HOLD_LAYERS") == "1":
            if not job.released[layer - 1].wait(60):
                raise RuntimeError(f"test hook: layer {layer - 1} was never released")
        if layer == job.fail_at:
            raise RuntimeError(f"test hook: writing layer {layer} failed")
        return super()._scatter_layer(job, fetched, layer)

    def get_block_ids_with_load_errors(self):
        bad = super().get_block_ids_with_load_errors()
        type(self).failed_blocks += len(bad)
        return bad

    def handle_preemptions(self, kv_connector_metadata):
        for rid in getattr(kv_connector_metadata, "preempted", ()):
            f = self._stores.get(rid)
            if f is not None and not f.done():
                type(self).preempted_store_waits += 1
        if os.environ.get("KVT_TEST_BREAK_PREEMPT_WAIT") == "1":
            return None  # the bug test_layers must catch: blocks reused under a store
        return super().handle_preemptions(kv_connector_metadata)

    def _store(self, rm):
        delay = float(os.environ.get("KVT_TEST_STORE_DELAY_S", "0"))
        if delay > 0:
            time.sleep(delay)
        return super()._store(rm)

    def request_finished(self, request, block_ids):
        delay, params = super().request_finished(request, block_ids)
        if os.environ.get("KVT_TEST_BREAK_DELAYED_FREE") == "1":
            return False, params
        return delay, params

    def get_finished(self, finished_req_ids):
        sending, recving = super().get_finished(finished_req_ids)
        if os.environ.get("KVT_TEST_BREAK_DELAYED_FREE") == "1":
            sending = None
        return sending, recving
