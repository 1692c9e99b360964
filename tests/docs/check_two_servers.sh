#!/usr/bin/env bash
# After docs/llama-server.md's "Two servers sharing kvtierd" block: the same prompt sent to
# the second server loads what the first stored (timings.cache_n, GET /kvtier hits): its two
# complete chunks and its tail record, i.e. all but the last of its 600 tokens.
set -euo pipefail
# kvtierd was started in the background with the servers: wait until it serves (its socket
# appears once the gRPC server listens). Stores sent before that are lost by design (a
# missing kvtierd is a miss, never an error), which would make this check meaningless.
for _ in $(seq 1 600); do
  [ -S /tmp/kvtier-example/kvtierd.sock ] && break
  sleep 0.1
done
for port in 8081 8082; do
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:$port/health)" = 200 ] && break
    sleep 0.1
  done
done
prompt=$(python3 -c 'print(list(range(100, 700)))')
body="{\"prompt\": $prompt, \"n_predict\": 2, \"temperature\": 0}"
first=$(curl -s localhost:8081/completion -d "$body")
for _ in $(seq 1 600); do  # the store runs after the answer: up to 60 s on a loaded machine
  python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j["chunks_put"] >= 2 and j["tails_put"] >= 1 else 1)' \
    < <(curl -s localhost:8081/kvtier) && break
  sleep 0.1
done
second=$(curl -s localhost:8082/completion -d "$body")
cached=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["timings"]["cache_n"])' "$second")
hits=$(curl -s localhost:8082/kvtier | python3 -c 'import json,sys; print(json.load(sys.stdin)["hits"])')
echo "first server: $(curl -s localhost:8081/kvtier)"
echo "second server: cache_n=$cached hits=$hits"
[ "$cached" = 599 ] && [ "$hits" = 1 ]
