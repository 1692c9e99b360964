// kvtier-bench kernels: copy-kernel throughput beside the physical limit.
//   CPU: GatherChunk / ScatterChunk GB/s for a Llama-3-8B chunk (32 layers, 8 KV heads,
//        head_dim 128, bf16, 256 tokens = 32 MiB, block 16, blocks scattered over the
//        cache) beside memcpy of the same bytes (1 thread and the kernels' thread count).
//   GPU (when built with CUDA and a device is present): CUDA gather/scatter between a
//        device cache and pinned host memory beside cudaMemcpyAsync of the same bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_mode.h"
#include "kernels/kv_copy.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#if KVT_KERNELS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace kvt::bench {
namespace {

constexpr uint32_t kLayers = 32, kHeads = 8, kHeadDim = 128, kBlock = 16, kTokens = 256;

struct Figures {
  std::string layout;
  double gather_gbps = 0, scatter_gbps = 0;
};

// Median seconds of `iters` runs of fn().
template <typename Fn>
double MedianSeconds(int iters, Fn&& fn) {
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double Gbps(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

KvLayout LayoutFor(LayoutKind kind) {
  if (kind == LayoutKind::kMLA) return KvLayout{kLayers, 1, 576, DType::kBF16, kind};
  return KvLayout{kLayers, kHeads, kHeadDim, DType::kBF16, kind};
}

// Allocates the tensors of `view` (sizes from view.tensor_bytes()) with `alloc`.
template <typename Alloc>
void AllocateTensors(PagedKvView& view, Alloc&& alloc) {
  const size_t n = view.layout.kind == LayoutKind::kCrossLayer ? 1 : view.layout.num_layers;
  for (size_t i = 0; i < n; ++i) {
    if (view.layout.kind == LayoutKind::kLlamaCppRows) {
      view.k_base.push_back(alloc(view.tensor_bytes()));
      view.v_base.push_back(alloc(view.tensor_bytes()));
    } else {
      view.layer_base.push_back(alloc(view.tensor_bytes()));
    }
  }
}

std::vector<int64_t> ScatteredBlockSlots(uint32_t num_blocks, uint32_t block_size) {
  std::vector<int64_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(42));
  std::vector<int64_t> slots;
  for (uint32_t t = 0; t < kTokens; ++t) {
    slots.push_back(blocks[t / block_size] * block_size + t % block_size);
  }
  return slots;
}

const std::vector<LayoutKind> kKinds = {LayoutKind::kFlashAttnNHD, LayoutKind::kFlashAttnHND,
                                        LayoutKind::kFlashInfer,   LayoutKind::kMLA,
                                        LayoutKind::kCrossLayer,   LayoutKind::kLlamaCppRows};

std::string Name(LayoutKind k) { return std::string(LayoutKindName(k)); }

// Copies `bytes` from src to dst on `threads` threads (the caller's included).
void ThreadedMemcpy(std::byte* dst, const std::byte* src, uint64_t bytes, uint32_t threads) {
  std::vector<std::jthread> w;
  const uint64_t part = bytes / threads;
  for (uint32_t i = 1; i < threads; ++i) {
    const uint64_t off = i * part, len = i + 1 == threads ? bytes - off : part;
    w.emplace_back([=] { std::memcpy(dst + off, src + off, len); });
  }
  std::memcpy(dst, src, threads > 1 ? part : bytes);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double Seconds(Fn&& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int RunKernels(int argc, char** argv) {
  CLI::App app{"copy kernels: gather/scatter GB/s vs memcpy of the same bytes", "kernels"};
  bool json = false;
  int iters = 15;
  uint32_t num_blocks = 64;
  uint32_t threads = 0;
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--iters", iters, "timed runs per figure (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--blocks", num_blocks, "blocks in the paged cache (>= 16)")
      ->check(CLI::Range(16u, 1u << 20));
  app.add_option("--threads", threads, "CPU copy threads (0 = hardware concurrency, max 8)");
  CLI11_PARSE(app, argc, argv);
  // Library logs go to stderr so stdout stays the table (or pure JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvtier-bench-kernels"));

  KvCopyOptions options;
  options.max_threads = threads;
  options.min_bytes_per_thread = 1 << 20;
  const uint32_t used_threads =
      threads ? threads : std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 8);
  const std::vector<int64_t> slots = ScatteredBlockSlots(num_blocks, kBlock);

  nlohmann::json out;
  out["shape"] = {{"layers", kLayers},        {"kv_heads", kHeads},         {"head_dim", kHeadDim},
                  {"dtype", "bf16"},          {"tokens", kTokens},          {"block_size", kBlock},
                  {"num_blocks", num_blocks}, {"cpu_threads", used_threads}};
  if (!json) {
    std::printf(
        "kvtier-bench kernels: %u layers x %u KV heads x head_dim %u bf16, %u tokens, "
        "block %u, %u blocks, %u CPU threads\n"
        "CPU: median of %d rounds; each round times memcpy (1 and %u threads) of the "
        "same bytes, gather and scatter back to back; ratio = kernel / %u-thread memcpy\n",
        kLayers, kHeads, kHeadDim, kTokens, kBlock, num_blocks, used_threads, iters, used_threads,
        used_threads);
    std::printf("%-14s %6s %11s %11s %11s %11s %9s %9s\n", "layout", "MiB", "memcpy 1t",
                "memcpy nt", "gather", "scatter", "gather/mc", "scatter/mc");
  }
  for (LayoutKind kind : kKinds) {
    PagedKvView view;
    view.layout = LayoutFor(kind);
    view.block_size = kBlock;
    view.num_blocks = num_blocks;
    std::vector<std::vector<std::byte>> storage;
    AllocateTensors(view, [&](uint64_t n) {
      storage.emplace_back(n, std::byte{7});
      return static_cast<void*>(storage.back().data());
    });
    std::vector<std::byte> payload(view.payload_bytes(slots.size()), std::byte{1});
    std::vector<std::byte> copy(payload.size(), std::byte{2});
    if (absl::Status s = GatherChunk(view, slots, payload, options); !s.ok()) {
      std::fprintf(stderr, "gather failed: %s\n", s.ToString().c_str());
      return 1;
    }
    std::vector<double> t1, tn, tg, ts;
    for (int i = 0; i < iters; ++i) {
      t1.push_back(Seconds([&] { ThreadedMemcpy(copy.data(), payload.data(), copy.size(), 1); }));
      tn.push_back(
          Seconds([&] { ThreadedMemcpy(copy.data(), payload.data(), copy.size(), used_threads); }));
      tg.push_back(Seconds([&] { (void)GatherChunk(view, slots, payload, options); }));
      ts.push_back(Seconds([&] { (void)ScatterChunk(view, slots, payload, options); }));
    }
    const uint64_t bytes = payload.size();
    const double m1 = Gbps(bytes, Median(t1)), mn = Gbps(bytes, Median(tn));
    const double g = Gbps(bytes, Median(tg)), sc = Gbps(bytes, Median(ts));
    out["cpu"]["layouts"][Name(kind)] = {{"payload_bytes", bytes},
                                         {"memcpy_1t_gbps", m1},
                                         {"memcpy_nt_gbps", mn},
                                         {"gather_gbps", g},
                                         {"scatter_gbps", sc},
                                         {"gather_over_memcpy", g / mn},
                                         {"scatter_over_memcpy", sc / mn}};
    if (!json) {
      std::printf("%-14s %6.1f %6.2f GB/s %6.2f GB/s %6.2f GB/s %6.2f GB/s %9.2f %9.2f\n",
                  Name(kind).c_str(), bytes / 1048576.0, m1, mn, g, sc, g / mn, sc / mn);
    }
  }

  out["gpu"]["available"] = CudaCopyAvailable();
#if KVT_KERNELS_HAVE_CUDA
  if (CudaCopyAvailable()) {
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    KvCopyOptions gopt;
    gopt.cuda_stream = stream;
    auto time_gpu = [&](auto&& fn) {
      fn();
      cudaStreamSynchronize(stream);
      return MedianSeconds(iters, [&] {
        fn();
        cudaStreamSynchronize(stream);
      });
    };
    if (!json) {
      std::printf(
          "GPU (device cache <-> pinned host payload):\n%-14s %9s %9s %10s %10s %10s %10s %10s\n",
          "layout", "MiB", "gather", "scatter", "D2H memcpy", "H2D memcpy", "gather/mc",
          "scatter/mc");
    }
    for (LayoutKind kind : kKinds) {
      PagedKvView view;
      view.device = KvDevice::kCuda;
      view.layout = LayoutFor(kind);
      view.block_size = kBlock;
      view.num_blocks = num_blocks;
      std::vector<void*> dev;
      AllocateTensors(view, [&](uint64_t n) {
        void* p = nullptr;
        cudaMalloc(&p, n);
        cudaMemset(p, 7, n);
        dev.push_back(p);
        return p;
      });
      const uint64_t bytes = view.payload_bytes(slots.size());
      std::byte* pinned = nullptr;
      void* dbuf = nullptr;
      cudaHostAlloc(reinterpret_cast<void**>(&pinned), bytes, cudaHostAllocDefault);
      cudaMalloc(&dbuf, bytes);
      std::span<std::byte> payload(pinned, bytes);
      if (absl::Status s = GatherChunk(view, slots, payload, gopt); !s.ok()) {
        std::fprintf(stderr, "CUDA gather failed: %s\n", s.ToString().c_str());
        return 1;
      }
      const double g =
          Gbps(bytes, time_gpu([&] { (void)GatherChunk(view, slots, payload, gopt); }));
      const double sc =
          Gbps(bytes, time_gpu([&] { (void)ScatterChunk(view, slots, payload, gopt); }));
      const double d2h = Gbps(
          bytes,
          time_gpu([&] { cudaMemcpyAsync(pinned, dbuf, bytes, cudaMemcpyDeviceToHost, stream); }));
      const double h2d = Gbps(
          bytes,
          time_gpu([&] { cudaMemcpyAsync(dbuf, pinned, bytes, cudaMemcpyHostToDevice, stream); }));
      out["gpu"]["layouts"][Name(kind)] = {{"payload_bytes", bytes},
                                           {"gather_gbps", g},
                                           {"scatter_gbps", sc},
                                           {"d2h_memcpy_gbps", d2h},
                                           {"h2d_memcpy_gbps", h2d},
                                           {"gather_over_memcpy", g / d2h},
                                           {"scatter_over_memcpy", sc / h2d}};
      if (!json) {
        std::printf("%-14s %9.1f %6.2f GB/s %6.2f GB/s %6.2f GB/s %6.2f GB/s %10.2f %10.2f\n",
                    Name(kind).c_str(), bytes / 1048576.0, g, sc, d2h, h2d, g / d2h, sc / h2d);
      }
      cudaFreeHost(pinned);
      cudaFree(dbuf);
      for (void* p : dev) cudaFree(p);
    }
    cudaStreamDestroy(stream);
  }
#endif
  if (!out["gpu"]["available"].get<bool>() && !json) {
    std::printf("GPU: no usable CUDA device (or CPU-only build); CUDA figures skipped\n");
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

KVT_BENCH_MODE(kernels, "copy kernels gather/scatter GB/s vs memcpy (CPU; CUDA when present)",
               RunKernels);

}  // namespace kvt::bench
