#!/usr/bin/env bash
# Tests the wheel of scripts/build-wheel.sh as a user gets it (issue 26):
#
#   bash scripts/test-wheel.sh [WHEEL]        (default: the one wheel in dist/)
#   bash scripts/test-wheel.sh --from-build BUILD_DIR
#                     (ctest's vllm_wheel: first scripts/build-wheel.sh --no-build from that
#                      build directory's targets, into a temporary directory)
#
#  1. installs it with pip (no index, no dependencies) into a fresh venv, in an
#     environment without LD_LIBRARY_PATH, PYTHONPATH or KVTIER_LIB;
#  2. ldd: every shared library the installed library and executables load resolves
#     inside the install (kvtier.libs/) or is one of the base system's (glibc's
#     libraries, libstdc++, libgcc_s); nothing "not found";
#  3. a chroot holding only those base libraries, /proc and the installed package (no
#     Debian -dev package, no build directory, no ld.so.cache; needs root): kvtierd --help
#     and kvtier --help run there, and the dynamic loader resolves all of libkvtier.so;
#  4. in the venv: the console scripts kvtierd --help, kvtier --help and
#     kvtier-pd-proxy --help, `import kvtier` (the library is the wheel's), and one vLLM
#     request with a hit: the wheel's kvtierd, an in-process vLLM engine (the pinned
#     vLLM venv of scripts/install-vllm.sh, reached through a .pth file placed after the
#     venv's own packages) with kvtier's connector, a prompt run twice: the second
#     loads its 512 complete-chunk tokens from kvtierd, with the same tokens;
#  5. prints the wheel's size (target <= 60 MB).
# Exit 0 all passed, 1 a check failed (it says which), 2 bad usage.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
wheel="${1:-}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kvt-wheel-test.XXXXXX")"
kvtierd_pid=""
proc_mounted=""
cleanup() {
  [[ -n "$proc_mounted" ]] && umount "$proc_mounted"
  [[ -n "$kvtierd_pid" ]] && kill "$kvtierd_pid" 2>/dev/null && wait "$kvtierd_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if [[ "$wheel" == "--from-build" ]]; then
  [[ -n "${2:-}" ]] || { echo "test-wheel: --from-build needs a build directory" >&2; exit 2; }
  wheel="$(bash "$src/scripts/build-wheel.sh" --no-build --build-dir "$2" --out "$tmp/dist" | tail -1)"
fi
if [[ -z "$wheel" ]]; then
  shopt -s nullglob
  w=("$src"/dist/kvtier-*.whl)
  (( ${#w[@]} == 1 )) || { echo "test-wheel: expected one dist/kvtier-*.whl, found ${#w[@]}" >&2; exit 2; }
  wheel="${w[0]}"
fi
[[ -f "$wheel" ]] || { echo "test-wheel: $wheel: no such file" >&2; exit 2; }
wheel="$(realpath "$wheel")"
vllm_py="$(bash "$src/scripts/install-vllm.sh" | tail -1)"
fail() { echo "test-wheel: FAIL: $*" >&2; exit 1; }
ok() { echo "test-wheel: ok: $*"; }
unset LD_LIBRARY_PATH PYTHONPATH KVTIER_LIB KVTIERD

# 1. Fresh venv (the vLLM venv's interpreter, so the vLLM packages fit), no index.
base_py="$("$vllm_py" -c 'import sys; print(sys._base_executable)')"
"$base_py" -m venv "$tmp/venv"
PIP_NO_INDEX=1 "$tmp/venv/bin/pip" install -q --disable-pip-version-check --no-deps "$wheel" \
  || fail "pip install $wheel"
site="$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
ok "installed $(basename "$wheel") into a fresh venv ($site)"

# 2. ldd: inside the install or a base library.
base_re='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$'
elves=("$site/kvtier/lib/libkvtier.so" "$site/kvtier/bin/kvtierd" "$site/kvtier/bin/kvtier")
mapfile -t bundled < <(find "$site/kvtier.libs" -name '*.so*' -type f 2>/dev/null)
for f in "${elves[@]}" "${bundled[@]}"; do
  [[ -f "$f" ]] || fail "$f is not in the install"
  while read -r name arrow path rest; do
    [[ -z "$name" || "$name" == /* || "$name" == statically ]] && continue  # the loader; no deps
    if [[ "$arrow" != "=>" ]]; then path="$name"; fi
    if [[ "$path" == "not" ]]; then fail "$(basename "$f") needs $name: not found"; fi
    if [[ "$path" == "$site"/* ]]; then continue; fi
    [[ "$name" =~ $base_re ]] || fail "$(basename "$f") resolves $name to $path, outside the wheel and the base system"
  done < <(ldd "$f")
done
ok "ldd: ${#elves[@]} ELF files and ${#bundled[@]} bundled libraries resolve inside the wheel or to libc/libstdc++/libgcc_s only"

# 3. A chroot with the base libraries only.
root="$tmp/root"
mkdir -p "$root/lib64" "$root/lib/x86_64-linux-gnu" "$root/tmp" "$root/pkg"
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgcc_s.so.1 libstdc++.so.6; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$root/lib/x86_64-linux-gnu/"
done
cp -a "$site/kvtier" "$site/kvtier.libs" "$root/pkg/"
# The loader resolves an executable's $ORIGIN (its RPATH into kvtier.libs/) through
# /proc/self/exe, as on any real system: mount /proc there (unmounted on exit).
mkdir -p "$root/proc"
mount -t proc proc "$root/proc" || fail "cannot mount /proc in the chroot (needs root)"
proc_mounted="$root/proc"
chroot "$root" /pkg/kvtier/bin/kvtierd --help > "$tmp/kvtierd-help.txt" 2>&1 \
  || fail "kvtierd --help in the chroot: $(tail -3 "$tmp/kvtierd-help.txt")"
chroot "$root" /pkg/kvtier/bin/kvtier --help > "$tmp/kvtier-help.txt" 2>&1 \
  || fail "kvtier --help in the chroot: $(tail -3 "$tmp/kvtier-help.txt")"
chroot "$root" /lib64/ld-linux-x86-64.so.2 --list /pkg/kvtier/lib/libkvtier.so > "$tmp/list.txt" 2>&1 \
  || fail "libkvtier.so in the chroot: $(grep -m3 'not found' "$tmp/list.txt")"
ok "chroot with only libc/libstdc++/libgcc_s: kvtierd --help, kvtier --help, libkvtier.so resolves"

# 4. The console scripts and the package in the venv.
"$tmp/venv/bin/kvtierd" --help > /dev/null 2>&1 || fail "kvtierd --help"
"$tmp/venv/bin/kvtier" --help > /dev/null 2>&1 || fail "kvtier --help"
"$tmp/venv/bin/kvtier-pd-proxy" --help > /dev/null 2>&1 || fail "kvtier-pd-proxy --help"
ok "console scripts kvtierd, kvtier, kvtier-pd-proxy answer --help"
lib="$("$tmp/venv/bin/python" -c 'import kvtier; print(kvtier.library_path())')" \
  || fail "import kvtier"
[[ "$lib" == "$site"/* ]] || fail "import kvtier uses $lib, not the wheel's library"
ok "import kvtier: $lib"

vllm_site="$("$vllm_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$vllm_site" > "$site/zz-vllm.pth"   # after the venv's own packages: kvtier is the wheel's
model="$("$tmp/venv/bin/python" -m kvtier.make_model --out "$tmp/model" --preset tiny | tail -1)"
mkdir -p "$tmp/kvtierd"
"$tmp/venv/bin/kvtierd" --listen "unix://$tmp/kvtierd/sock" --data-dir "$tmp/kvtierd/data" \
  --host-capacity 64MiB --disk-capacity 1GiB --ready-file "$tmp/kvtierd/ready" \
  --log-level warn > "$tmp/kvtierd.log" 2>&1 &
kvtierd_pid=$!
for _ in $(seq 100); do [[ -f "$tmp/kvtierd/ready" ]] && break; sleep 0.1; done
[[ -f "$tmp/kvtierd/ready" ]] || fail "the wheel's kvtierd did not start: $(tail -3 "$tmp/kvtierd.log")"
HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 \
VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false \
  "$tmp/venv/bin/python" - "$tmp/model" "unix://$tmp/kvtierd/sock" "$site" > "$tmp/vllm.log" 2>&1 <<'PY' \
  || fail "vLLM request with a hit: $(tail -5 "$tmp/vllm.log")"
import sys, time
model, addr, site = sys.argv[1:4]
import kvtier, kvtier.vllm
assert kvtier.vllm.__file__.startswith(site), kvtier.vllm.__file__
from vllm import LLM, SamplingParams, TokensPrompt
llm = LLM(model=model, enable_prefix_caching=False, max_model_len=2048, dtype="bfloat16",
          enforce_eager=True, seed=0, kv_transfer_config={
              "kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
              "kv_role": "kv_both",
              "kv_connector_extra_config": {"kvtierd": addr, "use_cost_model": False}})
sp = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
ids = [3 + (i * 7919) % 997 for i in range(600)]
run = lambda: llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)[0]
first = run()
assert (first.num_cached_tokens or 0) == 0, first.num_cached_tokens
for _ in range(20):  # the first request's store is asynchronous: ask until it is there
    second = run()
    if second.num_cached_tokens == 512:
        break
    time.sleep(0.5)
assert second.num_cached_tokens == 512, second.num_cached_tokens
assert list(second.outputs[0].token_ids) == list(first.outputs[0].token_ids)
print("hit", second.num_cached_tokens, "tokens, same output")
PY
ok "vLLM with the wheel's connector and kvtierd: $(grep '^hit' "$tmp/vllm.log")"

size=$(stat -c %s "$wheel")
echo "test-wheel: wheel size $size bytes ($(( (size + 524288) / 1048576 )) MiB), target <= 60 MB: $([[ $size -le 60000000 ]] && echo met || echo MISSED)"
echo "test-wheel: all checks passed"
