// Read bandwidth of this machine, for the roofline figures in bench/compare.py.
// `read_bw MIB REPEATS`: sums a MIB-sized buffer of floats (far larger than the caches) REPEATS
// times with OpenMP threads (OMP_NUM_THREADS) and prints the best pass as JSON:
// {"bytes": ..., "threads": ..., "best_gb_s": ..., "median_gb_s": ...}.
// Built by compare.py with: cc -O3 -march=native -fopenmp read_bw.c -o read_bw
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int Cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
  const int repeats = argc > 2 ? atoi(argv[2]) : 10;
  const size_t n = mib * 1024 * 1024 / sizeof(float);
  float* data = aligned_alloc(64, n * sizeof(float));
  if (!data || repeats < 1) return 1;
  // First touch from the threads that will read, as the engine's weights are.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) data[i] = (float)(i & 1023);
  double* rates = malloc(sizeof(double) * repeats);
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = Now();
    float total = 0;
    // Sixteen independent accumulators per thread keep the loop load-bound, not add-bound.
#pragma omp parallel reduction(+ : total)
    {
      float acc[16] = {0};
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 16) {
        for (int k = 0; k < 16; ++k) acc[k] += data[i + k];
      }
      for (int k = 0; k < 16; ++k) total += acc[k];
    }
    const double t1 = Now();
    sink += total;
    rates[r] = n * sizeof(float) / (t1 - t0) / 1e9;
  }
  qsort(rates, repeats, sizeof(double), Cmp);
  printf("{\"bytes\": %zu, \"threads\": %d, \"best_gb_s\": %.3f, \"median_gb_s\": %.3f}\n",
         n * sizeof(float), omp_get_max_threads(), rates[repeats - 1], rates[repeats / 2]);
  free(rates);
  free(data);
  return sink == -1.0f;
}
