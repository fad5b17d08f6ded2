#!/bin/sh
# Statement coverage of every package, children of multi-process tests
# included: internal/jobtest passes the test binary's coverage directory to
# the ranks it self-launches, and go test merges their counters into the
# profile. The per-package figures are computed here from that profile:
# the "coverage:" on go test's own "ok" line is the first such line in the
# package's output, which for a multi-process test is a child's own
# partial figure (riutils shows 6 % there against 86 % in the profile).
set -eu
GO=${GO:-go}
BIN=${BIN:-bin}
mkdir -p "$BIN"
profile="$BIN/cover.out"
$GO test -count=1 -timeout 15m -coverprofile="$profile" ./... >"$BIN/cover.log" 2>&1 || {
	cat "$BIN/cover.log"
	exit 1
}
# A block is "file:start,end statements count"; a package is the file's
# directory. The same block can appear once per test binary that ran it.
awk 'NR > 1 {
	split($1, a, ":"); pkg = a[1]; sub(/\/[^\/]*$/, "", pkg); sub(/^github.com\/seriema-go\/seriema\//, "", pkg)
	if (!($1 in n)) { n[$1] = $2; p[$1] = pkg }
	if ($3 > 0) hit[$1] = 1
}
END {
	for (b in n) { tot[p[b]] += n[b]; if (b in hit) cov[p[b]] += n[b]; all += n[b]; if (b in hit) allcov += n[b] }
	for (k in tot) printf "%-24s %5.1f%% of %5d statements\n", k, 100 * cov[k] / tot[k], tot[k] | "sort"
	close("sort")
	printf "%-24s %5.1f%% of %5d statements\n", "total", 100 * allcov / all, all
}' "$profile"
echo "profile: $profile (go tool cover -html=$profile)"
