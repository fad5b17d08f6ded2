#!/bin/sh
# Runs `go test` with the given arguments, streaming its output, and on
# failure repeats the lines that say why (test failures, panics, fatal
# errors with the crashing goroutine's frames, data races) at the end:
# CI keeps only the tail of the output, and a crash's cause is otherwise
# thousands of lines above it, under every other goroutine's stack.
GO=${GO:-go}
log=$(mktemp "${TMPDIR:-/tmp}/gotest.XXXXXX")
rcfile=$log.rc
{ $GO test "$@"; echo $? >"$rcfile"; } 2>&1 | tee "$log"
rc=$(cat "$rcfile" 2>/dev/null || echo 1)
if [ "$rc" != 0 ]; then
	echo
	echo "=== gotest: go test $* failed (exit $rc); what went wrong, from the output above:"
	awk '
		/^(panic: |fatal error: |unexpected fault address|\[signal |WARNING: DATA RACE|--- FAIL|FAIL|    [a-z_]+_test\.go:[0-9]+:)/ { left = 3 }
		/^(fatal error: |panic: |WARNING: DATA RACE)/ { left = 40 }
		left > 0 { print; left--; shown++ }
		shown > 400 { exit }
	' "$log"
fi
rm -f "$log" "$rcfile"
exit "$rc"
