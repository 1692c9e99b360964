"""KVTierConnector with test hooks:
  * before_load: run right before the worker loads (after the scheduler's lookup of the
    same step): lets a test kill or stop kvtierd in between;
  * counters of the loads (sync / async) and of vLLM's per-layer wait_for_layer_load calls;
  * $KVT_TEST_STORE_DELAY_S: the store thread sleeps this long before it copies a
    request's blocks (a slow store), so a test can check that vLLM does not reuse the
    blocks of a finished request until its store copied them;
  * $KVT_TEST_BREAK_DELAYED_FREE=1: request_finished lets vLLM free the blocks at once
    (and the worker never reports finished_sending): the bug that test must catch. Used
    only to check by hand that the test fails without kvtier's delayed free."""

import os
import time

from kvtier.vllm import KVTierConnector


class HookedKVTierConnector(KVTierConnector):
    before_load = None  # callable(), set by the test; called once per step that loads
    loads_seen = 0
    async_loads_seen = 0
    layer_waits = 0

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
        return super().wait_for_layer_load(layer_name)

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
