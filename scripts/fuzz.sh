#!/bin/sh
# Runs every Fuzz* target of every package for $FUZZTIME (default 30s).
#
# A target fails when go test fails and either wrote a reproducer into the
# package's testdata/fuzz/<target>/ or failed with something other than a
# bare "context deadline exceeded": with a duration -fuzztime, Go 1.26's
# fuzz coordinator can report its own deadline as a failure at the end of
# the run, with no input at fault (golang/go#75804, fixed in Go 1.27).
set -eu
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pkg in $($GO list ./...); do
	dir=$($GO list -f '{{.Dir}}' "$pkg")
	for target in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $target ($FUZZTIME)"
		corpus="$dir/testdata/fuzz/$target"
		before=$(ls "$corpus" 2>/dev/null | wc -l)
		if $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
			cat "$log"
			continue
		fi
		cat "$log"
		after=$(ls "$corpus" 2>/dev/null | wc -l)
		if [ "$after" -eq "$before" ] && grep -q '^    context deadline exceeded$' "$log" &&
			! grep -q -e 'panic:' -e 'Failing input written' "$log"; then
			echo "fuzz: $target: the coordinator's own deadline at the end (golang/go#75804), no input at fault; not counted"
			continue
		fi
		failed=1
	done
done
exit $failed
