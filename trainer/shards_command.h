// `trainbench shards synth|pack|verify`: make, convert and check webdataset
// shards (dataloader/shard_tools.h does the work; this is its command line).
//   shards synth --out DIR --count N (--samples N | --size BYTES) [--prefix P]
//                [--tokens MEAN[:SPREAD]] [--vocab V] [--field u16|u32|npy|txt]
//                [--payload-bytes BYTES[:SPREAD]] [--seed S]
//   shards pack INPUT_DIR --out DIR|PATTERN [--max-size BYTES] [--max-count N]
//   shards verify SPEC [--field EXT [--vocab V]]
// A summary goes to stdout, a progress bar to stderr when it is a terminal.
// Exit codes as cli.h: 2 also when verify found corrupt data (bad input),
// 3 when writing fails (disk full, I/O error).
#pragma once

#include <cstdint>  // int64_t, uint64_t
#include <string>

namespace CLI {
class App;
}

namespace trainbench {

class ShardsCommand {
 public:
  // Adds `shards` and its three subcommands to `app`.
  explicit ShardsCommand(CLI::App& app);
  bool parsed() const;
  // Runs the parsed subcommand; returns the exit code.
  int run();

 private:
  int run_synth();
  int run_pack();
  int run_verify();

  CLI::App* shards_ = nullptr;
  CLI::App* synth_ = nullptr;
  CLI::App* pack_ = nullptr;
  CLI::App* verify_ = nullptr;

  // As typed; sizes and MEAN:SPREAD pairs are parsed by run().
  struct SynthArguments {
    std::string out, prefix = "train", size, tokens = "512:256", field = "u16", payload_bytes = "0";
    int64_t count = 0, samples = 0, vocab = 50257;
    uint64_t seed = 1;
    bool overwrite = false;
  } synth_args_;
  struct PackArguments {
    std::string input_dir, out, max_size = "1G";
    int64_t max_count = 0;
    bool overwrite = false;
  } pack_args_;
  struct VerifyArguments {
    std::string spec, field, max_sample_bytes;  // "": data.max_sample_bytes' default
    int64_t vocab = 0;
  } verify_args_;
};

}  // namespace trainbench
