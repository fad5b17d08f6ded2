/*
 * shuffle.c: the MPI peer of mctsbench shuffle (issue 18). Every rank
 * generates the same records as mctsbench shuffle (100-byte records by
 * default, a destination from the same hash) and moves them with one
 * collective: MPI_Alltoallv for repartition, MPI_Allgather for broadcast.
 * Rank 0 prints one JSON line in mctsbench shuffle's format, with
 * impl "mpi": the mean over ranks of the record bytes a rank received over
 * the time of generating the records, the collective (counts exchange
 * and packing included; buffers are touched before) and reading what
 * arrived, and ok when every rank received the number of records that
 * were sent to it and each record it read is one meant for it: its
 * destination field (repartition), or its sender's rank and index in the
 * sender's block (broadcast). Reading each arriving record is what the
 * consumer of a shuffle does, and what mctsbench shuffle's receivers do
 * (they checksum every record).
 *
 * SHUFFLE_MPI_CORRUPT=1 flips a byte of the first record rank 0 received
 * before it is read, so that a test can see ok turn false.
 *
 *   mpirun -np 2 shuffle-mpi repartition|broadcast MIB RECORD [REPS]
 *
 * With REPS (default 1) the exchange runs REPS times and the line gives
 * the median rate, with "reps", "min" and "max" as mctsbench shuffle's
 * -reps does.
 *
 * Built by scripts/bench.sh (and the test) with mpicc from Debian's
 * libopenmpi-dev.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dest_of(uint64_t i, int rank, int procs) {
	/* mctsbench shuffle's genRecords, thread 0 */
	return (int)(((i * 0x9e3779b97f4a7c15ULL + (uint64_t)rank) >> 33) % (uint64_t)procs);
}

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, procs;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &procs);
	if ((argc != 4 && argc != 5) || (strcmp(argv[1], "repartition") && strcmp(argv[1], "broadcast"))) {
		if (rank == 0)
			fprintf(stderr, "usage: shuffle-mpi repartition|broadcast MIB RECORD [REPS]\n");
		MPI_Finalize();
		return 2;
	}
	int broadcast = strcmp(argv[1], "broadcast") == 0;
	const char *corrupt_env = getenv("SHUFFLE_MPI_CORRUPT");
	int corrupt = corrupt_env != NULL && strcmp(corrupt_env, "1") == 0;
	long long bytes = atoll(argv[2]) << 20;
	int rec = atoi(argv[3]);
	int reps = argc == 5 ? atoi(argv[4]) : 1;
	if (rec < 16 || bytes < rec || reps < 1 || reps > 1000) {
		MPI_Finalize();
		return 2;
	}
	long long n = bytes / rec;
	char *data = malloc((size_t)(n * rec));
	int *dest = malloc(sizeof(int) * (size_t)n);
	if (!data || !dest)
		MPI_Abort(MPI_COMM_WORLD, 1);
	/* Buffers are allocated and touched before the clock starts: page
	 * faults on first touch are not the shuffle's cost (ours reuses
	 * registered buffers too). */
	size_t outsz = (size_t)(n * rec), insz = (size_t)(n * rec) * (size_t)procs;
	char *packed = malloc(outsz), *in = malloc(insz);
	if (!packed || !in)
		MPI_Abort(MPI_COMM_WORLD, 1);
	memset(packed, 0, outsz);
	memset(in, 0, insz);
	memset(data, 0, outsz);
	double *rates = malloc(sizeof(double) * (size_t)reps);
	int all_good = 1;
	if (!rates)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (int run = 0; run < reps; run++) {
		MPI_Barrier(MPI_COMM_WORLD);
		/* The clock includes generating the records, as mctsbench shuffle's
		 * does (there the operators consume them as they are made). */
		double t0 = MPI_Wtime();
		for (long long i = 0; i < n; i++) {
			char *r = data + i * rec;
			memset(r, (int)i, (size_t)rec);
			uint64_t id = ((uint64_t)rank << 48) | (uint64_t)i;
			memcpy(r, &id, 8);
			dest[i] = dest_of((uint64_t)i, rank, procs);
			uint32_t d = (uint32_t)dest[i];
			memcpy(r + 8, &d, 4);
		}

		long long received = 0, records = 0;
		int ok = 1;
		if (broadcast) {
			/* counts above 2^31 bytes would need derived types: keep runs below */
			MPI_Allgather(data, (int)(n * rec), MPI_BYTE, in, (int)(n * rec), MPI_BYTE, MPI_COMM_WORLD);
			received = n * rec * procs;
			records = n * procs;
			if (corrupt && rank == 0)
				in[0] ^= 1;
			for (int p = 0; p < procs; p++)
				for (long long i = 0; i < n; i++) {
					uint64_t id;
					memcpy(&id, in + (p * n + i) * rec, 8);
					ok = ok && id == (((uint64_t)p << 48) | (uint64_t)i);
				}
		} else {
			int *scount = calloc((size_t)procs, sizeof(int)), *rcount = calloc((size_t)procs, sizeof(int));
			int *sdisp = calloc((size_t)procs, sizeof(int)), *rdisp = calloc((size_t)procs, sizeof(int));
			int *fill = calloc((size_t)procs, sizeof(int));
			for (long long i = 0; i < n; i++)
				scount[dest[i]] += rec;
			for (int p = 1; p < procs; p++)
				sdisp[p] = sdisp[p - 1] + scount[p - 1];
			for (long long i = 0; i < n; i++) {
				int d = dest[i];
				memcpy(packed + sdisp[d] + fill[d], data + i * rec, (size_t)rec);
				fill[d] += rec;
			}
			MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
			long long total = 0;
			for (int p = 0; p < procs; p++) {
				rdisp[p] = (int)total;
				total += rcount[p];
			}
			MPI_Alltoallv(packed, scount, sdisp, MPI_BYTE, in, rcount, rdisp, MPI_BYTE, MPI_COMM_WORLD);
			received = total;
			records = total / rec;
			if (corrupt && rank == 0 && records > 0)
				in[8] ^= 1;
			for (long long i = 0; i < records; i++) {
				uint32_t d;
				memcpy(&d, in + i * rec + 8, 4);
				ok = ok && (int)d == rank;
			}
			free(scount);
			free(rcount);
			free(sdisp);
			free(rdisp);
			free(fill);
		}
		double secs = MPI_Wtime() - t0;
		/* Every record sent must have arrived somewhere exactly once. */
		long long sent = broadcast ? n * procs : n, all_sent = 0, all_recv = 0;
		MPI_Reduce(&sent, &all_sent, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		MPI_Reduce(&records, &all_recv, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		double rate = (double)received / secs / 1e9, sum = 0;
		int all_ok = 0;
		MPI_Reduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
		rates[run] = sum / procs;
		all_good = all_good && all_ok && all_sent == all_recv;
	}
	if (rank == 0) {
		qsort(rates, (size_t)reps, sizeof(double), cmp_double);
		double med = reps % 2 ? rates[reps / 2] : (rates[reps / 2 - 1] + rates[reps / 2]) / 2;
		printf("{\"pattern\":\"%s\",\"impl\":\"mpi\",\"config\":\"-\",\"transport\":\"mpi\",\"procs\":%d,\"threads\":1,"
		       "\"bytes\":%lld,\"gb_per_s_per_proc\":%.6f,\"ok\":%s,\"reps\":%d,\"min\":%.6f,\"max\":%.6f}\n",
		       argv[1], procs, bytes, med, all_good ? "true" : "false", reps, rates[0], rates[reps - 1]);
	}
	free(rates);
	free(data);
	free(dest);
	free(packed);
	free(in);
	MPI_Finalize();
	return 0;
}
