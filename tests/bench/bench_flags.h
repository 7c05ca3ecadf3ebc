// --name=value flags of the benchmarks (not tests; no CLI11 needed).
#ifndef ECHO_TESTS_BENCH_BENCH_FLAGS_H_
#define ECHO_TESTS_BENCH_BENCH_FLAGS_H_

#include <map>
#include <string>

namespace echo::bench {

// The --name=value (or --name, read as "true") arguments from argv[first] on.
std::map<std::string, std::string> ParseFlags(int argc, char** argv, int first);

// The flag as a number; `fallback` when it is absent or not a number.
double FlagDouble(const std::map<std::string, std::string>& flags,
                  const std::string& name, double fallback);

}  // namespace echo::bench

#endif  // ECHO_TESTS_BENCH_BENCH_FLAGS_H_
