// kvtier-make-gguf: writes a synthetic Llama GGUF (see llamacpp/gguf_generator.h).
//
//   kvtier-make-gguf --size tiny --out /tmp/tiny.gguf
//   kvtier-make-gguf --size demo --out models/demo.gguf --seed 7
//   kvtier-make-gguf --size tiny --no-vocab --out ids-only.gguf   (tokenizer "none")
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "llamacpp/gguf_generator.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a Llama-architecture GGUF with seeded random weights"};
  std::string size = "tiny";
  std::string out;
  std::string vocab = kvt::llamacpp::DefaultVocabPath();
  bool no_vocab = false;
  bool f32 = false;
  uint64_t seed = 0;
  bool seed_set = false;
  app.add_option("--size", size, "tiny | demo")->check(CLI::IsMember({"tiny", "demo"}));
  app.add_option("--out", out, "output path")->required();
  app.add_option("--vocab", vocab, "vocab-only GGUF whose tokenizer is copied")
      ->capture_default_str();
  app.add_flag("--no-vocab", no_vocab, "no tokenizer (tokenizer.ggml.model = none)");
  app.add_flag("--f32", f32, "F32 weight matrices instead of F16");
  app.add_option_function<uint64_t>(
      "--seed",
      [&](uint64_t v) {
        seed = v;
        seed_set = true;
      },
      "weight seed");
  CLI11_PARSE(app, argc, argv);

  auto spec = kvt::llamacpp::SyntheticModelPreset(size, no_vocab ? "" : vocab);
  if (!spec.ok()) {
    std::fprintf(stderr, "kvtier-make-gguf: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  if (seed_set) spec->seed = seed;
  spec->f16 = !f32;
  if (absl::Status s = kvt::llamacpp::WriteSyntheticModel(*spec, out); !s.ok()) {
    std::fprintf(stderr, "kvtier-make-gguf: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s (%s, %u layers, embd %u, seed %llu)\n", out.c_str(), spec->name.c_str(),
              spec->n_layer, spec->n_embd, static_cast<unsigned long long>(spec->seed));
  return 0;
}
