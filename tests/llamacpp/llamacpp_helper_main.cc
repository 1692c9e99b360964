// A second engine process for the cross-process tests: runs one random-token prompt on
// the tiny model through kvtier (host tier + the disk tier in --disk) and writes
// u64 loaded_tokens, u64 n_logits, float logits[n] to --out.
//   --mode store: run and store the prompt's chunks (flushed before exit)
//   --mode load:  run without storing
#include <cstdio>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "llama_test_util.h"
#include "llamacpp/kv_adapter.h"

int main(int argc, char** argv) {
  using namespace kvt::llamacpp;
  CLI::App app{"kvtier llama.cpp test helper"};
  std::string model, disk, mode, out;
  uint64_t seed = 0;
  size_t tokens = 0;
  app.add_option("--model", model)->required();
  app.add_option("--disk", disk)->required();
  app.add_option("--mode", mode)->required()->check(CLI::IsMember({"store", "load"}));
  app.add_option("--seed", seed)->required();
  app.add_option("--tokens", tokens)->required();
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);

  auto engine = LlamaEngine::Create(testing::TinyEngineOptions(false, model));
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  auto store = testing::MakeStore(disk);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  auto connector = testing::MakeConnector(**engine, *store);
  if (!connector.ok()) {
    std::fprintf(stderr, "%s\n", connector.status().ToString().c_str());
    return 1;
  }
  auto adapter = LlamaKvAdapter::Create(engine->get(), *connector);
  if (!adapter.ok()) {
    std::fprintf(stderr, "%s\n", adapter.status().ToString().c_str());
    return 1;
  }
  RunOptions o;
  o.store = mode == "store";
  const auto prompt = testing::RandomTokens(seed, tokens, (*engine)->n_vocab());
  auto r = (*adapter)->Run(prompt, o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 1;
  }
  (*connector)->Flush();
  (*store)->Flush();
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  const uint64_t n = r->logits.size();
  f.write(reinterpret_cast<const char*>(&r->loaded_tokens), sizeof(uint64_t));
  f.write(reinterpret_cast<const char*>(&n), sizeof(n));
  f.write(reinterpret_cast<const char*>(r->logits.data()),
          static_cast<std::streamsize>(n * sizeof(float)));
  return f.good() ? 0 : 1;
}
