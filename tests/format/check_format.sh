#!/usr/bin/env bash
# Fails when a tracked C++ file is not clang-format clean (.clang-format at
# the repository root). usage: check_format.sh REPO_ROOT [CLANG_FORMAT]
set -euo pipefail
root=${1:?repository root}
clang_format=${2:-clang-format}
cd "$root"
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: $clang_format not found (Debian: apt-get install clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu')
if [ "${#files[@]}" -eq 0 ]; then
  echo "check_format: no tracked C++ files under $root" >&2
  exit 1
fi
"$clang_format" --dry-run -Werror "${files[@]}"
echo "check_format: ${#files[@]} files clang-format clean"
