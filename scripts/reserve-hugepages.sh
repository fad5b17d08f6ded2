#!/bin/sh
# Best effort: reserve 2 MiB hugepages so the tests exercise the hugetlb rung
# of alloc's page ladder. Needs root; without it, or when the kernel refuses,
# the tests exercise the fallback rungs instead and say so in their logs.
want=${SERIEMA_HUGEPAGES:-32}
f=/proc/sys/vm/nr_hugepages
[ -r "$f" ] || { echo "hugepages: $f missing; tests use the fallback rungs"; exit 0; }
have=$(cat "$f")
if [ "$have" -ge "$want" ]; then
	echo "hugepages: $have × 2 MiB reserved"
	exit 0
fi
if [ -w "$f" ] && echo "$want" > "$f" 2>/dev/null; then
	echo "hugepages: reserved $(cat "$f") × 2 MiB (asked for $want)"
else
	echo "hugepages: cannot reserve (not root?); $have reserved; tests use the fallback rungs"
fi
exit 0
