// Runs a libFuzzer target's LLVMFuzzerTestOneInput over files, as libFuzzer
// does for a corpus given without -runs, with any compiler: CTest replays the
// seeds and every input a fuzzing run once found (tests/fuzz/regressions/)
// on each build (without sanitizers there: crashes, aborts and the targets'
// own checks show; memory errors only in the ASan build). Arguments are files or
// folders (their regular files, names not starting with '.' or "README").
// A finding aborts the process; a clean pass prints how many inputs it ran.
#include <algorithm>  // std::sort: a folder in name order
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int replay(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);  // a finding aborts: the input it was is named first
  (void)LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code error;
    if (std::filesystem::is_directory(arg, error)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_regular_file() && name[0] != '.' && name.rfind("README", 0) != 0) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& file : files) errors += replay(file), ++inputs;
    } else {
      errors += replay(arg), ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "replay: no input given\n");
    return 1;
  }
  std::printf("replay: %d input(s), no finding\n", inputs - errors);
  return errors == 0 ? 0 : 1;
}
