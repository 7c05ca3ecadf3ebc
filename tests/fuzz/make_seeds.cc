// Writes the fuzzers' seed corpora from the test fixtures, at build time:
//   make_seeds <tests/data> <tests/fuzz/seeds> <out dir>
// out/graph_plan: GenerateRecomputePlanRequests (up to 64 KiB) for the graph
// fixtures, the hook-captured graphs in seeds/graph_plan and the text and
// Checkmate graphs, under several budgets, chunking on in one;
// out/checkmate: the Checkmate JSON files up to 16 KiB; out/text_graph: the
// text graphs; out/profile_cache: cache files as Save writes them.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "adapter/graph_convert.h"
#include "echo/v1/planner.pb.h"
#include "planner/checkmate_import.h"
#include "planner/text_format.h"
#include "server/profiler/legacy_profile_cache.h"

namespace fs = std::filesystem;

namespace {

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const fs::path& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

std::vector<fs::path> FilesWithExtension(const fs::path& dir,
                                         const std::string& extension) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == extension) files.push_back(entry.path());
  }
  return files;
}

// One request per budget kind: none, a memory limit below the plain peak,
// an overhead ratio, and allocator rounding with a depth bound.
// Larger requests are not written: `make fuzz` caps inputs at this size
// (-max_len) so that executions stay fast, and would truncate them.
constexpr size_t kMaxRequestBytes = 64 << 10;

constexpr size_t kMaxCheckmateSeedBytes = 16 << 10;

void WriteRequest(const echo::v1::GenerateRecomputePlanRequest& request,
                  const fs::path& path) {
  const std::string bytes = request.SerializeAsString();
  if (bytes.size() <= kMaxRequestBytes) WriteFile(path, bytes);
}

void WritePlanRequests(const echo::v1::Graph& graph, const fs::path& dir,
                       const std::string& stem) {
  echo::v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = graph;
  request.set_policy(echo::v1::RECOMPUTE_POLICY_AUTO);
  WriteRequest(request, dir / (stem + ".plain"));
  echo::v1::GenerateRecomputePlanRequest limited = request;
  limited.set_memory_limit_bytes(1000);
  WriteRequest(limited, dir / (stem + ".limit"));
  echo::v1::GenerateRecomputePlanRequest ratio = request;
  ratio.set_max_overhead_ratio(0.2);
  WriteRequest(ratio, dir / (stem + ".ratio"));
  echo::v1::GenerateRecomputePlanRequest rounded = request;
  rounded.mutable_allocator()->set_rounding_bytes(512);
  rounded.set_max_recompute_depth(2);
  rounded.mutable_device()->set_name("h100-80gb");
  WriteRequest(rounded, dir / (stem + ".rounded"));
  // As the PyTorch hook asks: a catalog device, an overhead budget and the
  // loss chunked where AUTO finds it worth it.
  echo::v1::GenerateRecomputePlanRequest chunked = ratio;
  chunked.mutable_device()->set_name("h100-80gb");
  chunked.set_chunking(echo::v1::CHUNKING_MODE_AUTO);
  chunked.set_max_overhead_ratio(1.0);
  WriteRequest(chunked, dir / (stem + ".chunked"));
}

bool WriteSpecs(const absl::StatusOr<echo::planner::GraphBuilder>& specs,
                const fs::path& dir, const std::string& stem) {
  absl::StatusOr<echo::v1::Graph> proto =
      specs.ok() ? echo::adapter::GraphSpecsToProto(*specs)
                 : absl::StatusOr<echo::v1::Graph>(specs.status());
  if (!proto.ok()) {
    std::fprintf(stderr, "%s: %s\n", stem.c_str(),
                 std::string(proto.status().message()).c_str());
    return false;
  }
  WritePlanRequests(*proto, dir, stem);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DATA_DIR SEED_DIR OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path data(argv[1]), seeds(argv[2]), out(argv[3]);
  for (const char* target :
       {"graph_plan", "checkmate", "text_graph", "profile_cache"}) {
    fs::create_directories(out / target);
  }
  bool ok = true;
  // The graph fixtures, and graphs the PyTorch hook captured at shapes
  // where sizes coincide (batch x length = vocabulary crashed echod: issue
  // 49).
  for (const fs::path& dir : {data / "graphs", seeds / "graph_plan"}) {
    for (const fs::path& pb : FilesWithExtension(dir, ".pb")) {
      echo::v1::Graph graph;
      if (!graph.ParseFromString(ReadFile(pb))) {
        std::fprintf(stderr, "%s: not a graph proto\n", pb.c_str());
        ok = false;
        continue;
      }
      WritePlanRequests(graph, out / "graph_plan", pb.stem().string());
    }
  }
  for (const fs::path& json : FilesWithExtension(data / "checkmate", ".json")) {
    const std::string text = ReadFile(json);
    // The larger models parse too slowly to mutate (60 runs/s for 60 KB).
    if (text.size() <= kMaxCheckmateSeedBytes) {
      WriteFile(out / "checkmate" / json.filename(), text);
    }
    ok &= WriteSpecs(echo::planner::ImportCheckmateSpecs(text),
                     out / "graph_plan", json.stem().string());
  }
  for (const fs::path& json :
       FilesWithExtension(seeds / "checkmate", ".json")) {
    WriteFile(out / "checkmate" / json.filename(), ReadFile(json));
  }
  for (const fs::path& text_file :
       FilesWithExtension(seeds / "text_graph", ".graph")) {
    fs::copy_file(text_file, out / "text_graph" / text_file.filename(),
                  fs::copy_options::overwrite_existing);
    ok &= WriteSpecs(echo::planner::ParseTextGraphSpecs(ReadFile(text_file)),
                     out / "graph_plan", text_file.stem().string());
  }
  using echo::server::SerializeLegacyProfileCache;
  WriteFile(out / "profile_cache" / "empty", SerializeLegacyProfileCache({}));
  WriteFile(out / "profile_cache" / "three",
            SerializeLegacyProfileCache(
                {{"gemm|f16[128,256]x[256,512]|h100-80gb|cublas-13", 1.25e-5},
                 {"conv\tkey with \"escapes\"\n\x01", 0.5},
                 {"zero", 0}}));
  return ok ? 0 : 1;
}
