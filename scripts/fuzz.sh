#!/bin/sh
# Runs every Fuzz* target of every package for $FUZZTIME (default 30s).
set -eu
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
failed=0
for pkg in $($GO list ./...); do
	for target in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $target ($FUZZTIME)"
		if ! $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"; then
			failed=1
		fi
	done
done
exit $failed
