#!/usr/bin/env bash
# Regenerates the profiles the Go toolchain optimizes occl's programs with
# (profile-guided optimization: it inlines and devirtualizes the calls the
# profile finds hot). The profile is what occl-bench's CPU profiles record
# over small and large AllReduce and AllToAll and a small send and receive
# (a group) on shared memory, 2 and 4 processes, built without a profile;
# it goes to every main package that links occl for users: occl-bench and
# the C library (cgo, which the Python package builds). `go build` reads
# default.pgo from the main package's directory by itself.
#
# Usage: bench/pgo/profile.sh   (from anywhere; takes about half a minute)
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -pgo=off -o "$tmp/occl-bench" ./bench/cmd/occl-bench
run() {
  local name=$1; shift
  "$tmp/occl-bench" "$@" -cpuprofile "$tmp/$name.pprof" >/dev/null
}
run ar8 -np 2 -op allreduce -b 8 -e 8 -n 3000000 -w 1000 -z 1
run a2a32 -np 2 -op alltoall -b 32 -e 32 -n 3000000 -w 1000 -z 1
run sr16 -np 2 -op sendrecv -b 16 -e 16 -n 3000000 -w 1000 -z 1
run a2a1k-np4 -np 4 -op alltoall -b 1024 -e 1024 -n 300000 -w 1000 -z 1
run ar1m -np 2 -op allreduce -b 1M -e 1M -n 3000 -w 100
run a2a1m-np4 -np 4 -op alltoall -b 1M -e 1M -n 2000 -w 100
# Rank r > 0 wrote $name.pprof.r beside rank 0's $name.pprof.
go tool pprof -proto "$tmp"/*.pprof* > "$tmp/default.pgo"
for dir in bench/cmd/occl-bench cgo; do
  cp "$tmp/default.pgo" "$dir/default.pgo"
done
echo "wrote bench/cmd/occl-bench/default.pgo and cgo/default.pgo"
