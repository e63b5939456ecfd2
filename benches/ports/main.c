// Port-contention microbenchmark driver. Build: make ; run: taskset -c 1 ./bench
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>
#include "tests.h"
void add_chain(unsigned long iters);  // 100 dependent `add rax,1` per iteration

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmpd(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
static double med5(double *v) { qsort(v, 5, sizeof *v, cmpd); return v[2]; }
#define TARGET 0.3
static _Alignas(64) unsigned char mem[192];

// One clock reading: `it` iterations of the 100-add dependent chain (one add
// per core cycle) give TSC ticks per core cycle and the core clock in GHz.
static void clock_once(unsigned long it, double *ratio, double *ghz) {
  double t0 = now(); unsigned long c0 = __rdtsc();
  add_chain(it);
  unsigned long c1 = __rdtsc(); double t1 = now();
  *ratio = (double)(c1 - c0) / (it * 100.0); *ghz = it * 100.0 / (t1 - t0) / 1e9;
}

// The median of 5 readings of 1e9 adds, after a warm-up.
static void calibrate(double *ratio, double *ghz) {
  double r[5], g[5]; unsigned long it = 10000000UL;  // 1e9 adds
  add_chain(it / 10);
  for (int i = 0; i < 5; i++) clock_once(it, &r[i], &g[i]);
  *ratio = med5(r); *ghz = med5(g);
}

int main(int argc, char **argv) {
  _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ|DAZ
  for (int i = 0; i < 128; i++) mem[i] = (i & 1) ? 0x3F : 0x80 + (i & 6);  // bytes 0x80../0x3F, words ~0x3F8x
  unsigned long km = 0x5555AAAA0F0FF0F0UL; memcpy(mem + 128, &km, 8);
  const char *filter = argc > 1 ? argv[1] : NULL;
  double ratio, ghz; calibrate(&ratio, &ghz);
  double tscghz = ratio * ghz;
  printf("# calib: TSC/core = %.4f  core = %.3f GHz  TSC = %.3f GHz\n", ratio, ghz, tscghz);
  printf("%-42s %8s %8s %8s %8s  %s\n", "test", "cyc/it", "cyc/it", "insn/cyc", "cyc/insn", "pools");
  printf("%-42s %8s %8s %8s %8s\n", "", "(tsc)", "(wall)", "", "(per 1)");
  int n = sizeof TESTS / sizeof *TESTS;
  for (int t = 0; t < n; t++) {
    const struct test *T = &TESTS[t];
    if (filter && !strstr(T->name, filter)) continue;
    unsigned long it = 100000; double dt;
    for (;;) { double t0 = now(); T->fn(it, mem); dt = now() - t0; if (dt > 0.02) break; it *= 4; }
    it = (unsigned long)(it * TARGET / dt);
    double ct[5], cw[5];
    for (int i = 0; i < 5; i++) {
      // quick re-calibration (1e8 dependent adds, ~30 ms) right before each rep to track frequency drift
      clock_once(1000000UL, &ratio, &ghz);
      double t0 = now(); unsigned long c0 = __rdtsc();
      T->fn(it, mem);
      unsigned long c1 = __rdtsc(); double t1 = now();
      double groups = (double)it * T->unroll;  // "iteration" = one group of the mix
      ct[i] = (c1 - c0) / ratio / groups;
      cw[i] = (t1 - t0) * ghz * 1e9 / groups;
    }
    double a = med5(ct), b = med5(cw);
    printf("%-42s %8.3f %8.3f %8.3f %8.3f  %s\n", T->name, a, b, T->group_insns / a, a / T->group_insns, T->pools);
    fflush(stdout);
  }
  calibrate(&ratio, &ghz);
  printf("# calib(end): TSC/core = %.4f  core = %.3f GHz\n", ratio, ghz);
  return 0;
}
