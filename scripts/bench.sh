#!/bin/sh
# make bench: every benchmark in one go, then rewrites the generated part of
# docs/benchmarks.md and the charts in docs/img. Raw results stay in $OUT
# (ignored by git). Each result file is written, then shown: a pipe into
# tee would hide a benchmark's failure (sh has no pipefail), and a failed
# benchmark must fail make bench rather than leave its table out.
set -eu
GO=${GO:-go}
OUT=${OUT:-bench-results}
BIN=${BIN:-bin}
mkdir -p "$OUT" docs/img
$GO build -o "$BIN/mctsbench" ./cmd/mctsbench
(cd bench/peers && $GO build -o "../../$BIN/peers" .)
echo "== go test -bench (every package)"
$GO test -run '^$' -bench . -benchmem -count 3 ./... > "$OUT/gobench.txt"
cat "$OUT/gobench.txt"
echo "== Table 2: micro, every mode"
"$BIN/mctsbench" micro -mode limit,raw,send,write,trad,ovfl -sizes 8,64,256 -n 500000 -json > "$OUT/micro.json"
cat "$OUT/micro.json"
echo "== Table 2 over tcp, beside a plain Go TCP frame stream (limit)"
"$BIN/mctsbench" micro -mode limit,raw,write,trad,ovfl -transport tcp -sizes 8,64,256 -n 300000 -json > "$OUT/micro-tcp.json"
cat "$OUT/micro-tcp.json"
echo "== Fig. 2: raw over sizes, shm and tcp"
sizes=8,16,32,64,128,256,512,1024,2048,4096
{ "$BIN/mctsbench" micro -mode raw -sizes $sizes -n 500000 -json
  "$BIN/mctsbench" micro -mode raw -sizes $sizes -n 200000 -transport tcp -json; } > "$OUT/fig2.json"
cat "$OUT/fig2.json"
echo "== latency"
{ "$BIN/mctsbench" latency -size 8 -n 200000 -json
  "$BIN/mctsbench" latency -size 8 -n 50000 -transport tcp -json
  "$BIN/mctsbench" latency -size 8 -n 50000 -transport tcp-plain -json; } > "$OUT/latency.json"
cat "$OUT/latency.json"
if [ -f /usr/include/rdma/fabric.h ] && command -v "${CC:-gcc}" >/dev/null 2>&1; then
	echo "== libfabric (ofi, tcp and shm providers) beside our tcp and shm, one after the other"
	$GO build -tags ofi -o "$BIN/mctsbench-ofi" ./cmd/mctsbench
	# Go's own report, not the PSM libraries', should a run fault in C code
	# (scripts/test-ofi.sh says why).
	export IPATH_NO_BACKTRACE=1 HFI_NO_BACKTRACE=1
	m="-mode raw,write,trad,ovfl -sizes 8,64,256 -n 200000 -json"
	{ for tr in shm tcp; do
		# shellcheck disable=SC2086
		"$BIN/mctsbench-ofi" micro $m -transport $tr
		# shellcheck disable=SC2086
		FI_PROVIDER=$tr "$BIN/mctsbench-ofi" micro $m -transport ofi
		"$BIN/mctsbench-ofi" latency -size 8 -n 50000 -transport $tr -json
		FI_PROVIDER=$tr "$BIN/mctsbench-ofi" latency -size 8 -n 50000 -transport ofi -json
	done; } > "$OUT/ofi.json"
	cat "$OUT/ofi.json"
	echo "== ofi over tcp: the one-sided path (SERIEMA_OFI_ONESIDED=1) against the message path, one after the other"
	{ for os in 0 1; do
		SERIEMA_OFI_ONESIDED=$os FI_PROVIDER=tcp "$BIN/mctsbench-ofi" micro -mode raw,write -sizes 8,4096,65536 -n 20000 -transport ofi -json
	done; } > "$OUT/ofi-rma.json"
	cat "$OUT/ofi-rma.json"
else
	echo "== libfabric (ofi): skipped, libfabric-dev or a C compiler is missing" > "$OUT/ofi.json"
	cat "$OUT/ofi.json"
fi
echo "== Go peers (net/rpc, gRPC) over a unix socket, over TCP and over rconn"
{ "$BIN/peers" -json
  "$BIN/peers" -net tcp -mode grpc-unary,netrpc-unary -json
  "$BIN/peers" -net conn -json; } > "$OUT/peers.json"
cat "$OUT/peers.json"
echo "== sockets over the transport: rconn, a unix socket, TCP loopback"
"$BIN/mctsbench" conn -json > "$OUT/conn.json"
cat "$OUT/conn.json"
echo "== RDMOs against their one-sided sequences (shm, tcp; ofi-tcp when built)"
{ "$BIN/mctsbench" rdmo -json
  if [ -x "$BIN/mctsbench-ofi" ]; then FI_PROVIDER=tcp "$BIN/mctsbench-ofi" rdmo -transports ofi -json; fi; } > "$OUT/rdmo.json"
cat "$OUT/rdmo.json"
echo "== shuffle: repartition and broadcast, package shuffle's designs beside plain sockets and MPI (when mpicc is installed)"
# Medians of interleaved runs: one run of these swings 2x on a shared VM.
# Each round runs every implementation of ours once (one command) and the
# MPI peer, under its own launcher, once; the report folds each cell's
# lines into their median, so that ours / MPI compares the same spells.
have_mpi=
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
	mpicc -O2 -o "$BIN/shuffle-mpi" bench/mpi/csrc/shuffle.c && have_mpi=1
fi
{ for _ in 1 2 3; do
	"$BIN/mctsbench" shuffle repartition -mb 512 -impl wr,rd,sr,socket,memcpy -buffers fixed,adaptive -json
	if [ -n "$have_mpi" ]; then mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN/shuffle-mpi" repartition 512 100 1; fi
  done
  for _ in 1 2 3; do
	"$BIN/mctsbench" shuffle broadcast -mb 256 -json
	if [ -n "$have_mpi" ]; then mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN/shuffle-mpi" broadcast 256 100 1; fi
  done
  "$BIN/mctsbench" shuffle repartition -mb 256 -impl wr,rd,sr -transport tcp -json
  # Over libfabric too (its tcp and shm providers), for reference.
  if [ -x "$BIN/mctsbench-ofi" ]; then for pr in tcp shm; do
	FI_PROVIDER=$pr "$BIN/mctsbench-ofi" shuffle repartition -mb 256 -impl wr,rd,sr -transport ofi -json
  done; fi
  # Two sizes: a 500 000-order join lasts ~70 ms, within the VM's
  # scheduling noise (runs range ±40 %); 2 000 000 orders last ~0.3 s.
  "$BIN/mctsbench" shuffle join -orders 500000 -reps 5 -json
  "$BIN/mctsbench" shuffle join -orders 2000000 -reps 5 -json; } > "$OUT/shuffle.json"
cat "$OUT/shuffle.json"
echo "== idle cost: an idle 2-process job, 10 s window, then wake-ups; then over tcp beside plain Go TCP; then 8 processes over tcp (14 connections each)"
{ "$BIN/mctsbench" idle -duration 10s -json
  "$BIN/mctsbench" idle -duration 2s -wakes 30 -transport tcp -json
  "$BIN/mctsbench" idle -procs 8 -duration 5s -wakes 0 -transport tcp -json; } > "$OUT/idle.json"
cat "$OUT/idle.json"
echo "== Fig. 3: MCTS scaling"
"$BIN/mctsbench" scale -json -png docs/img/scale.png > "$OUT/scale.json"
cat "$OUT/scale.json"
"$BIN/mctsbench" report -dir "$OUT" -doc docs/benchmarks.md -img docs/img -command "make bench"
