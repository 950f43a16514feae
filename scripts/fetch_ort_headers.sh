#!/usr/bin/env bash
# Fetch the ONNX Runtime C/C++ headers, which the PyPI wheel does not ship.
#
# Debian trixie's libonnxruntime-dev (1.21) carries them. We only *extract* the
# .deb (its runtime needs a newer glibc than bookworm has); the C API is
# ABI-stable, so 1.21 headers drive the newer library the onnxruntime wheel ships.
# apt runs with a private state dir, so the machine's own apt config is untouched.
#
# Usage: fetch_ort_headers.sh [DEST]   (prints the include dir on stdout)
set -euo pipefail

dest=${1:-${ORTSERVE_CACHE:-$HOME/.cache/ortserve}/onnxruntime-headers-1.21}
inc="$dest/usr/include/onnxruntime"
if [ -f "$inc/onnxruntime_cxx_api.h" ]; then
  echo "$inc"
  exit 0
fi

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/etc/preferences.d" "$dest"
: >"$state/status"
echo "deb http://deb.debian.org/debian trixie main" >"$state/sources.list"
opts=(-o "Dir::State=$state" -o "Dir::State::Lists=$state/lists" -o "Dir::State::status=$state/status"
      -o "Dir::Cache=$state/cache" -o "Dir::Etc::SourceList=$state/sources.list"
      -o "Dir::Etc::SourceParts=/nonexistent" -o "Dir::Etc::PreferencesParts=$state/etc/preferences.d"
      -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1" -o "Acquire::Languages=none" -o "APT::Sandbox::User=root")
echo "ortserve: fetching ONNX Runtime headers (Debian trixie libonnxruntime-dev)..." >&2
apt-get "${opts[@]}" -q update >&2
(cd "$state" && apt-get "${opts[@]}" -q download libonnxruntime-dev >&2)
dpkg-deb -x "$state"/libonnxruntime-dev_*.deb "$dest"
test -f "$inc/onnxruntime_cxx_api.h" || { echo "ortserve: headers missing after extract" >&2; exit 1; }
echo "$inc"
