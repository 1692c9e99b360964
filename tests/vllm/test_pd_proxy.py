"""kvtier-pd-proxy's own paths, against stand-in upstream servers (no engine).

The upstreams are small FastAPI apps on loopback that record what they receive and answer
as a vLLM server would (a prefill answer with kv_transfer_params and prompt_token_ids, a
decode answer, JSON or SSE); a real kvtierd serves the proxy's lookups. Checked: what
the prefill and decode instances receive, round-robin over two of each, a prefill 4xx
returned as it came (no decode), a dead or failing prefill instance (the request goes to
decode as is), a dead decode instance (502 naming it), a malformed handoff record, chunks that never reach kvtierd (the proxy
waits --wait-timeout-ms, then sends the request on), a kvtierd that does not answer,
SSE passed through as it streams, a body that is not JSON, and bad command lines (exit 2
naming the argument). The real PD path is test_pd.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import harness
import pd_servers


def serve(app) -> tuple[str, object]:
    import uvicorn
    port = pd_servers.free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline:
            raise RuntimeError("stand-in server did not start")
        time.sleep(0.02)
    return url, server


class Upstream:
    """A stand-in vLLM server. `mode`: "ok", "400", "500"; `handoff`: the
    kv_transfer_params a prefill answer carries; `sse`: decode answers stream."""

    def __init__(self, name):
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, StreamingResponse
        self.name, self.seen, self.mode, self.handoff = name, [], "ok", None
        app = FastAPI()

        async def answer(request: Request, path: str):
            body = await request.json()
            self.seen.append((path, body))
            if self.mode == "400":
                return JSONResponse({"error": {"message": "max_tokens is bad"}}, 400)
            if self.mode == "500":
                return JSONResponse({"error": {"message": "engine died"}}, 500)
            if body.get("stream"):
                async def events():
                    for i in range(3):
                        yield f"data: {json.dumps({'from': self.name, 'i': i})}\n\n"
                    yield "data: [DONE]\n\n"
                return StreamingResponse(events(), media_type="text/event-stream")
            out = {"from": self.name, "choices": [{"text": "x", "prompt_token_ids":
                                                   list(range(3, 3 + 40))}],
                   "prompt_token_ids": list(range(3, 3 + 40))}
            if self.handoff is not None:
                out["kv_transfer_params"] = self.handoff
            return out

        @app.post("/v1/completions")
        async def completions(request: Request):
            return await answer(request, "/v1/completions")

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            return await answer(request, "/v1/chat/completions")

        self.url, self.server = serve(app)


def post(url, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class PDProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvt-pd-proxy-")
        cls.daemon = harness.Kvtierd(cls.dir).start()
        cls.p = [Upstream("p0"), Upstream("p1")]
        cls.d = [Upstream("d0"), Upstream("d1")]
        from kvtier.pd_proxy import ProxyOptions, create_app
        cls.opts = ProxyOptions(prefill=[u.url for u in cls.p], decode=[u.url for u in cls.d],
                                wait_timeout_ms=300)
        cls.url, cls.server = serve(create_app(cls.opts))

    @classmethod
    def tearDownClass(cls):
        for s in [cls.server] + [u.server for u in cls.p + cls.d]:
            s.should_exit = True
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        for u in self.p + self.d:
            u.seen.clear()
            u.mode, u.handoff = "ok", None

    def handoff(self, **over):
        from kvtier.pd_handoff import HANDOFF_KEY, HANDOFF_VERSION
        rec = {"version": HANDOFF_VERSION, "model_id": "stand-in@0", "num_layers": 2,
               "num_kv_heads": 1, "head_dim": 8, "dtype": "bfloat16", "layout": "flashinfer",
               "tp_world_size": 1, "engine_extra": "{}", "chunk_tokens": 16, "tenant": "",
               "kvtierd": self.daemon.address}
        rec.update(over)
        return {HANDOFF_KEY: rec}

    def test_prefill_gets_one_token_decode_gets_the_request_round_robin(self):
        body = {"model": "m", "prompt": "w1 w2", "max_tokens": 7, "stream": False, "n": 1,
                "min_tokens": 3, "logprobs": 1}
        froms = []
        for _ in range(4):
            status, headers, text = post(self.url + "/v1/completions", body)
            self.assertEqual(status, 200, text)
            froms.append((headers["x-kvtier-pd-prefill"], json.loads(text)["from"]))
            self.assertEqual(headers["x-kvtier-pd-ready"], "none")
        # Round-robin (the cycle's position carries over from earlier requests).
        decodes, prefills = [f[1] for f in froms], [f[0] for f in froms]
        self.assertIn(decodes, (["d0", "d1"] * 2, ["d1", "d0"] * 2))
        urls = [u.url for u in self.p]
        self.assertIn(prefills, (urls * 2, urls[::-1] * 2))
        for u in self.p:
            self.assertEqual(len(u.seen), 2)
            path, pre = u.seen[0]
            self.assertEqual(path, "/v1/completions")
            self.assertEqual((pre["max_tokens"], pre["n"], pre["return_token_ids"]), (1, 1, True))
            self.assertNotIn("min_tokens", pre)
            self.assertNotIn("stream", pre)
            self.assertEqual(pre["prompt"], "w1 w2")
        for u in self.d:
            self.assertEqual(u.seen, [("/v1/completions", body)] * 2, "the original request")

    def test_chat_prefill_caps_max_completion_tokens(self):
        body = {"model": "m", "messages": [{"role": "user", "content": "w1"}],
                "max_completion_tokens": 9, "stream": True}
        status, headers, text = post(self.url + "/v1/chat/completions", body)
        self.assertEqual(status, 200, text)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"))
        events = [line for line in text.splitlines() if line.startswith("data: ")]
        self.assertEqual(len(events), 4)
        self.assertEqual(events[-1], "data: [DONE]")
        pre = [s for u in self.p for s in u.seen][0][1]
        self.assertEqual((pre["max_completion_tokens"], pre["max_tokens"]), (1, 1))
        self.assertEqual([s for u in self.d for s in u.seen],
                         [("/v1/chat/completions", body)])

    def test_prefill_4xx_is_returned_and_nothing_decodes(self):
        for u in self.p:
            u.mode = "400"
        status, _, text = post(self.url + "/v1/completions", {"model": "m", "prompt": "w1"})
        self.assertEqual(status, 400)
        self.assertIn("max_tokens is bad", text)
        self.assertEqual([s for u in self.d for s in u.seen], [])

    def test_failing_or_dead_prefill_sends_the_request_to_decode(self):
        for u in self.p:
            u.mode = "500"
        status, headers, text = post(self.url + "/v1/completions", {"model": "m", "prompt": "a"})
        self.assertEqual(status, 200, text)
        self.assertIn(json.loads(text)["from"], ("d0", "d1"))
        from kvtier.pd_proxy import ProxyOptions, create_app
        dead = f"http://127.0.0.1:{pd_servers.free_port()}"  # nothing listens there
        url, server = serve(create_app(ProxyOptions(prefill=[dead], decode=[self.d[0].url])))
        try:
            status, headers, text = post(url + "/v1/completions", {"model": "m", "prompt": "a"})
        finally:
            server.should_exit = True
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)["from"], "d0")
        self.assertEqual(headers["x-kvtier-pd-ready"], "none")

    def test_dead_decode_instance_is_a_502_naming_it(self):
        from kvtier.pd_proxy import ProxyOptions, create_app
        dead = f"http://127.0.0.1:{pd_servers.free_port()}"  # nothing listens there
        url, server = serve(create_app(ProxyOptions(prefill=[self.p[0].url], decode=[dead])))
        try:
            status, headers, text = post(url + "/v1/completions", {"model": "m", "prompt": "a"})
        finally:
            server.should_exit = True
        self.assertEqual(status, 502)
        self.assertIn(f"decode instance {dead}", text)
        self.assertEqual(headers["x-kvtier-pd-decode"], dead)
        self.assertEqual(len(self.p[0].seen), 1, "the prefill ran")

    def test_malformed_handoff_is_not_waited_for(self):
        for u in self.p:
            u.handoff = self.handoff(version=99)
        status, headers, _ = post(self.url + "/v1/completions", {"model": "m", "prompt": "a"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["x-kvtier-pd-ready"], "none")
        from kvtier.pd_handoff import parse_handoff
        with self.assertRaisesRegex(ValueError, r"version = 99"):
            parse_handoff(self.handoff(version=99))
        with self.assertRaisesRegex(ValueError, r"num_layers = 0: expected a positive"):
            parse_handoff(self.handoff(num_layers=0))
        with self.assertRaisesRegex(ValueError, r"tenant: missing"):
            h = self.handoff()
            del h["kvtier_handoff"]["tenant"]
            parse_handoff(h)
        self.assertIsNone(parse_handoff({"other": 1}))

    def test_chunks_missing_from_kvtierd_wait_the_timeout_then_decode(self):
        for u in self.p:
            u.handoff = self.handoff()  # 40 prompt tokens = 2 chunks of 16, never stored
        t0 = time.monotonic()
        status, headers, text = post(self.url + "/v1/completions", {"model": "m", "prompt": "a"})
        waited = time.monotonic() - t0
        self.assertEqual(status, 200, text)
        self.assertEqual(headers["x-kvtier-pd-ready"], "no")
        self.assertGreaterEqual(float(headers["x-kvtier-pd-wait-ms"]), 300)
        self.assertGreaterEqual(waited, 0.3)
        self.assertEqual(len([s for u in self.d for s in u.seen]), 1)

    def test_unreachable_kvtierd_sends_the_request_on(self):
        for u in self.p:
            u.handoff = self.handoff(kvtierd="unix://" + os.path.join(self.dir, "none.sock"))
        status, headers, _ = post(self.url + "/v1/completions", {"model": "m", "prompt": "a"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["x-kvtier-pd-ready"], "no")

    def test_body_that_is_not_json_is_a_400(self):
        status, _, text = post(self.url + "/v1/completions", None, raw=b"{nope")
        self.assertEqual(status, 400)
        self.assertIn("not JSON", text)
        status, _, text = post(self.url + "/v1/completions", [1, 2])
        self.assertEqual(status, 400)
        self.assertIn("JSON object", text)
        self.assertEqual([s for u in self.p + self.d for s in u.seen], [])

    def test_bad_command_lines_exit_2_naming_the_argument(self):
        def run(*args):
            return subprocess.run([sys.executable, "-m", "kvtier.pd_proxy", *args],
                                  capture_output=True, text=True, timeout=60)
        r = run("--decode", "http://127.0.0.1:1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--prefill: at least one URL is required", r.stderr)
        r = run("--prefill", "127.0.0.1:1", "--decode", "http://127.0.0.1:2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--prefill '127.0.0.1:1': expected an http:// or https:// URL", r.stderr)
        r = run("--prefill", "http://a:1", "--decode", "http://b:2", "--wait-timeout-ms", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--wait-timeout-ms 0: expected 1..600000", r.stderr)
        r = run("--prefill", "http://a:1", "--decode", "http://b:2", "--kvtierd-token-file",
                os.path.join(self.dir, "no-such-file"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("--kvtierd-token-file", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
