"""kvtier-pd-proxy: disaggregated prefill (PD) over kvtierd for vLLM's OpenAI server.

    kvtier-pd-proxy --port 8100 --prefill http://127.0.0.1:8001 --decode http://127.0.0.1:8002

takes OpenAI `/v1/completions` and `/v1/chat/completions` requests and, for each one:

  1. sends it to a prefill instance (vLLM with kv_role "kv_producer") with max_tokens = 1,
     stream off, n = 1 and return_token_ids on: the producer computes the prompt and
     stores its complete chunks in kvtierd, and its answer carries the prompt's token ids
     and, in kv_transfer_params, the namespace of those chunks (kvtier.pd_handoff);
  2. waits until kvtierd holds every complete chunk of the prompt (kvt_lookup under that
     namespace, every ~5 ms, at most --wait-timeout-ms; one lookup per TP rank);
  3. sends the original request, unchanged, to a decode instance (kv_role "kv_consumer"),
     which loads those chunks from kvtierd instead of computing them;
  4. streams the decode instance's answer back as it comes (SSE when "stream" is set).

Several --prefill and --decode URLs are picked round-robin, each list on its own.

The prompt's last, partial chunk (len % chunk_tokens tokens) is not handed over: kvtier
stores and loads whole chunks only, so the decode instance computes those < chunk_tokens
tokens itself (LMCache's discard_partial_chunks: true). docs/vllm.md ("Disaggregated
prefill") says why and what it costs (measured by bench/pd_bench.py).

What goes wrong degrades to computing, never to a wrong answer: a prefill instance that
fails (HTTP 5xx, no connection) or chunks that are not all in kvtierd when the wait ends
send the request to the decode instance as is (it computes what it cannot load); a
prefill answer 4xx (the request is bad) is returned to the client as it came. Each
answer carries `x-kvtier-pd-*` headers: the instances used, the prefill and wait times
in ms, and whether the chunks were all there (`ready`: yes, no, or none to wait for).

Built on FastAPI + uvicorn (server) and httpx (client), the versions vLLM's own OpenAI
server uses (pinned in scripts/install-vllm.lock). Install: `pip install kvtier[pd]`
outside a vLLM environment.
"""


import argparse
import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from kvtier.pd_handoff import lookup_options, parse_handoff

logger = logging.getLogger("kvtier.pd_proxy")

ENDPOINTS = ("/v1/completions", "/v1/chat/completions")


@dataclass
class ProxyOptions:
    """Settings of one proxy. URLs are base URLs (http://host:port) of vLLM OpenAI servers."""
    prefill: list[str]
    decode: list[str]
    # kvtierd address the proxy looks chunks up in; None: the one in the producer's
    # handoff record (the address the producer stores to).
    kvtierd: str | None = None
    kvtierd_token: str | None = None
    wait_timeout_ms: int = 5000    # longest wait for the chunks, per request
    poll_ms: float = 5.0           # pause between two lookups while waiting
    lookup_deadline_ms: int = 1000  # one kvtierd lookup incl. retries
    connect_timeout_s: float = 10.0

    def validate(self) -> None:
        """ValueError naming the first bad setting."""
        for name in ("prefill", "decode"):
            urls = getattr(self, name)
            if not urls:
                raise ValueError(f"--{name}: at least one URL is required")
            for u in urls:
                if not (u.startswith("http://") or u.startswith("https://")):
                    raise ValueError(f"--{name} {u!r}: expected an http:// or https:// URL")
        if self.kvtierd is not None and not self.kvtierd:
            raise ValueError("--kvtierd: empty address")
        if not 0 < self.wait_timeout_ms <= 600_000:
            raise ValueError(f"--wait-timeout-ms {self.wait_timeout_ms}: expected 1..600000")
        if not 0 < self.lookup_deadline_ms <= 600_000:
            raise ValueError(f"--lookup-deadline-ms {self.lookup_deadline_ms}: expected "
                             "1..600000")
        if not 0 < self.poll_ms <= 1000:
            raise ValueError(f"--poll-ms {self.poll_ms}: expected (0, 1000]")


class RoundRobin:
    """Not thread-safe (one event loop uses it). next() cycles through `items`."""

    def __init__(self, items: list[str]):
        self._items = [u.rstrip("/") for u in items]
        self._i = 0

    def next(self) -> str:
        u = self._items[self._i % len(self._items)]
        self._i += 1
        return u


class ChunkWaiter:
    """Thread-safe. Looks a prompt's complete chunks up in kvtierd under a handoff's
    namespace through lookup-only kvtier connectors (libkvtier, one per namespace, TP rank
    and address, kept open)."""

    def __init__(self, opts: ProxyOptions):
        self._opts = opts
        self._lock = threading.Lock()
        self._conns: dict[tuple, Any] = {}

    def _connector(self, rec: dict, rank: int):
        from kvtier._native import Connector
        addr = self._opts.kvtierd or rec.get("kvtierd")
        if not addr:
            raise ValueError("the producer stores into an embedded store, not kvtierd; a "
                             "PD producer needs kv_connector_extra_config.kvtierd")
        o = lookup_options(rec, rank, addr, self._opts.kvtierd_token,
                           self._opts.lookup_deadline_ms)
        key = tuple(sorted(vars(o).items()))
        with self._lock:
            c = self._conns.get(key)
            if c is None:
                c = self._conns[key] = Connector(o)
            return c

    def missing_tokens(self, rec: dict, prompts: list[list[int]]) -> int:
        """Tokens of complete chunks of `prompts` that kvtierd does not hold yet (summed
        over prompts and TP ranks; 0 = all there). Blocks for one lookup per prompt and
        rank. Raises KvtError / ValueError when a connector cannot be opened."""
        C = rec["chunk_tokens"]
        missing = 0
        for rank in range(rec["tp_world_size"]):
            conn = self._connector(rec, rank)
            for ids in prompts:
                target = len(ids) // C * C
                if target == 0:
                    continue
                # Chunk keys hang on complete chunks only: one more token makes the lookup
                # report every complete chunk (it always leaves the last token to compute).
                _, cached = conn.lookup(ids[:target] + ids[:1])
                missing += target - min(cached, target)
        return missing

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()


def _prefill_body(body: dict, chat: bool) -> dict:
    """The request as the prefill instance gets it: one token, no stream, one choice,
    the prompt's token ids in the answer."""
    pre = dict(body)
    for k in ("stream", "stream_options", "min_tokens", "kv_transfer_params", "best_of"):
        pre.pop(k, None)
    pre.update(max_tokens=1, n=1, return_token_ids=True)
    if chat and "max_completion_tokens" in pre:
        pre["max_completion_tokens"] = 1
    return pre


def _prompt_token_ids(answer: dict, chat: bool) -> list[list[int]] | None:
    if chat:
        ids = answer.get("prompt_token_ids")
        return [ids] if isinstance(ids, list) else None
    out = []
    for c in answer.get("choices") or []:
        ids = c.get("prompt_token_ids")
        if not isinstance(ids, list):
            return None
        out.append(ids)
    return out or None


@dataclass
class _Handoff:
    prefill_url: str
    decode_url: str
    prefill_ms: float = 0.0
    wait_ms: float = 0.0
    ready: str = "none"   # yes | no | none (nothing to wait for)

    def as_headers(self) -> dict[str, str]:
        return {"x-kvtier-pd-prefill": self.prefill_url, "x-kvtier-pd-decode": self.decode_url,
                "x-kvtier-pd-prefill-ms": f"{self.prefill_ms:.2f}",
                "x-kvtier-pd-wait-ms": f"{self.wait_ms:.2f}", "x-kvtier-pd-ready": self.ready}


def create_app(opts: ProxyOptions,
               after_handoff: Callable[[dict], Awaitable[None] | None] | None = None):
    """The proxy as an ASGI app (FastAPI). `after_handoff(info)`, if given, runs after the
    wait and before the decode request (tests use it to act between the two; `info` has
    the prefill and decode URLs and `ready`). ValueError for bad options."""
    import httpx
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.background import BackgroundTask

    opts.validate()
    prefills, decodes = RoundRobin(opts.prefill), RoundRobin(opts.decode)
    waiter = ChunkWaiter(opts)
    timeout = httpx.Timeout(None, connect=opts.connect_timeout_s)
    state: dict[str, Any] = {}

    async def lifespan(app):
        state["client"] = httpx.AsyncClient(timeout=timeout,
                                            limits=httpx.Limits(max_connections=None))
        try:
            yield
        finally:
            await state["client"].aclose()
            waiter.close()

    app = FastAPI(title="kvtier-pd-proxy", lifespan=lifespan)
    app.state.options = opts

    async def wait_for_chunks(rec: dict, prompts: list[list[int]]) -> bool:
        deadline = time.monotonic() + opts.wait_timeout_ms / 1000
        while True:
            try:
                missing = await asyncio.to_thread(waiter.missing_tokens, rec, prompts)
            except Exception as e:  # noqa: BLE001 - a broken lookup only costs the wait
                logger.warning("kvtier-pd-proxy: kvtierd lookup failed (%s); sending the "
                               "request on (the decode instance computes what it lacks)", e)
                return False
            if missing == 0:
                return True
            if time.monotonic() >= deadline:
                logger.warning("kvtier-pd-proxy: %d prompt tokens of complete chunks not in "
                               "kvtierd after %d ms; sending the request on", missing,
                               opts.wait_timeout_ms)
                return False
            await asyncio.sleep(opts.poll_ms / 1000)

    async def prefill(h: _Handoff, body: dict, path: str, chat: bool) -> Response | None:
        """Runs the prefill and the wait; a Response to return as is (a 4xx), else None."""
        client: httpx.AsyncClient = state["client"]
        t0 = time.perf_counter()
        try:
            r = await client.post(h.prefill_url + path, json=_prefill_body(body, chat))
        except httpx.HTTPError as e:
            logger.warning("kvtier-pd-proxy: prefill instance %s failed (%s: %s); the decode "
                           "instance computes the prompt", h.prefill_url, type(e).__name__, e)
            return None
        h.prefill_ms = (time.perf_counter() - t0) * 1000
        if 400 <= r.status_code < 500:
            return Response(r.content, status_code=r.status_code,
                            media_type=r.headers.get("content-type"), headers=h.as_headers())
        if r.status_code != 200:
            logger.warning("kvtier-pd-proxy: prefill instance %s answered %d; the decode "
                           "instance computes the prompt", h.prefill_url, r.status_code)
            return None
        answer = r.json()
        try:
            rec = parse_handoff(answer.get("kv_transfer_params"))
        except ValueError as e:
            logger.warning("kvtier-pd-proxy: %s", e)
            return None
        if rec is None:
            return None  # nothing stored (shorter than a chunk): nothing to wait for
        prompts = _prompt_token_ids(answer, chat)
        if prompts is None:
            logger.warning("kvtier-pd-proxy: the prefill answer has no prompt_token_ids "
                           "(vLLM older than 0.32?); not waiting for its chunks")
            return None
        t1 = time.perf_counter()
        h.ready = "yes" if await wait_for_chunks(rec, prompts) else "no"
        h.wait_ms = (time.perf_counter() - t1) * 1000
        return None

    async def handle(request: Request, path: str) -> Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError) as e:
            return JSONResponse({"error": {"message": f"request body is not JSON: {e}",
                                           "type": "BadRequestError", "code": 400}}, 400)
        if not isinstance(body, dict):
            return JSONResponse({"error": {"message": "request body must be a JSON object",
                                           "type": "BadRequestError", "code": 400}}, 400)
        chat = path.endswith("/chat/completions")
        h = _Handoff(prefills.next(), decodes.next())
        early = await prefill(h, body, path, chat)
        if early is not None:
            return early
        if after_handoff is not None:
            res = after_handoff({"prefill": h.prefill_url, "decode": h.decode_url,
                                 "ready": h.ready})
            if asyncio.iscoroutine(res):
                await res
        logger.info("kvtier-pd-proxy: %s prefill %s %.1f ms, wait %.1f ms (%s) -> decode %s",
                    path, h.prefill_url, h.prefill_ms, h.wait_ms, h.ready, h.decode_url)
        client: httpx.AsyncClient = state["client"]
        headers = {"content-type": "application/json"}
        if "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]
        try:
            r = await client.send(client.build_request("POST", h.decode_url + path,
                                                       content=json.dumps(body).encode(),
                                                       headers=headers), stream=True)
        except httpx.HTTPError as e:
            return JSONResponse({"error": {"message": f"decode instance {h.decode_url}: "
                                           f"{type(e).__name__}: {e}", "type": "BadGateway",
                                           "code": 502}}, 502, headers=h.as_headers())
        out_headers = h.as_headers()
        return StreamingResponse(r.aiter_raw(), status_code=r.status_code,
                                 media_type=r.headers.get("content-type"), headers=out_headers,
                                 background=BackgroundTask(r.aclose))

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await handle(request, "/v1/chat/completions")

    @app.get("/v1/models")
    async def models():
        r = await state["client"].get(opts.decode[0].rstrip("/") + "/v1/models")
        return Response(r.content, status_code=r.status_code,
                        media_type=r.headers.get("content-type"))

    @app.get("/health")
    async def health():
        return {"prefill": list(opts.prefill), "decode": list(opts.decode)}

    return app


def parse_args(argv: list[str] | None = None) -> tuple[ProxyOptions, argparse.Namespace]:
    p = argparse.ArgumentParser(
        prog="kvtier-pd-proxy",
        description="Disaggregated prefill for vLLM through kvtierd: prefill on a kv_producer, "
                    "wait until kvtierd holds the prompt's chunks, decode on a kv_consumer "
                    "(see docs/vllm.md).")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8100, help="listen port (default 8100)")
    p.add_argument("--prefill", action="append", default=[], metavar="URL",
                   help="a prefill instance (vLLM, kv_role kv_producer); repeat for several")
    p.add_argument("--decode", action="append", default=[], metavar="URL",
                   help="a decode instance (vLLM, kv_role kv_consumer); repeat for several")
    p.add_argument("--kvtierd", default=None, metavar="ADDR",
                   help="kvtierd to look chunks up in (default: the producer's address)")
    p.add_argument("--kvtierd-token-file", default=None, metavar="FILE",
                   help="bearer token for kvtierd (first line of FILE)")
    p.add_argument("--wait-timeout-ms", type=int, default=5000,
                   help="longest wait for a prompt's chunks (default 5000)")
    p.add_argument("--poll-ms", type=float, default=5.0,
                   help="pause between lookups while waiting (default 5)")
    p.add_argument("--lookup-deadline-ms", type=int, default=1000,
                   help="one kvtierd lookup incl. retries (default 1000)")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"))
    a = p.parse_args(argv)
    token = None
    if a.kvtierd_token_file:
        try:
            with open(a.kvtierd_token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except OSError as e:
            p.error(f"--kvtierd-token-file {a.kvtierd_token_file}: {e.strerror}")
    opts = ProxyOptions(prefill=a.prefill, decode=a.decode, kvtierd=a.kvtierd,
                        kvtierd_token=token, wait_timeout_ms=a.wait_timeout_ms,
                        poll_ms=a.poll_ms, lookup_deadline_ms=a.lookup_deadline_ms)
    try:
        opts.validate()
    except ValueError as e:
        p.error(str(e))
    return opts, a


def main(argv: list[str] | None = None) -> int:
    """Console entry point `kvtier-pd-proxy` (also `python -m kvtier.pd_proxy`). Exit 2
    for bad arguments (argparse names them)."""
    opts, a = parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print("kvtier-pd-proxy: needs fastapi, uvicorn and httpx (pip install 'kvtier[pd]'; "
              "a vLLM environment has them)", flush=True)
        return 1
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    uvicorn.run(create_app(opts), host=a.host, port=a.port, log_level=a.log_level)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
