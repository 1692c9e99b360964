"""KVTierConnector with a test hook run right before the worker loads (after the
scheduler's lookup of the same step): lets a test kill or stop kvtierd in between."""

from kvtier.vllm import KVTierConnector


class HookedKVTierConnector(KVTierConnector):
    before_load = None  # callable(), set by the test; called once per step that loads
    loads_seen = 0

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        if any(r.load_tokens > 0 for r in meta.requests):
            type(self).loads_seen += 1
            hook = type(self).before_load
            if hook is not None:
                type(self).before_load = None
                hook()
        return super().start_load_kv(forward_context, **kwargs)
