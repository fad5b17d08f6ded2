#!/bin/sh
# Tests bench/peers, a separate module (its gRPC dependency stays out of the
# library). Needs the Go module proxy the first time; without it, says so
# and skips rather than fail the library's tests.
set -u
GO=${GO:-go}
cd bench/peers || exit 1
if ! $GO mod download >/dev/null 2>&1; then
	echo "bench/peers: modules unavailable (no module proxy?): its tests are skipped"
	exit 0
fi
$GO vet ./... && $GO test -race -count=1 ./...
