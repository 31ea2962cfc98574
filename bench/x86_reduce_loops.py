"""The reduce row's loop (`sum(relu(a*b+c)*d)` over four 64 MB float32 streams, AVX-512) written by hand in several
shapes and timed side by side, to see whether any loop reads these inputs faster than another on this machine.

    python bench/x86_reduce_loops.py [--calls N] [--runs N]

Needs gcc and an AVX-512 CPU (this is a measurement tool, not part of tinycore). The shapes: the x86 renderer's
loop as it emits it (`imul` + `movsxd` index, 2 zmm accumulators, loads folded into the arithmetic), gcc's loop as
it compiles the C renderer's kernel (one byte offset stepped by 128), the renderer's loop with its index
strength-reduced, software prefetches 256 B to 2 KB ahead on every stream (`prefetcht0`), `prefetchnta` 4 KB ahead,
4 accumulators, and each stream's next block (4, 16 or 64 KB) prefetched before computing on the current one. Each
run interleaves the shapes call by call and prints each one's least thread CPU time over `--calls` calls.
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

ASSEMBLY = r"""
    .intel_syntax noprefix
    .text
    .globl renderer_loop
renderer_loop:
    push rbx
    vxorps xmm0, xmm0, xmm0
    vmovaps zmm1, zmm0
    vmovaps zmm2, zmm0
    mov r9d, 0
    .p2align 4
1:  imul ebx, r9d, 0x20
    movsxd rbx, ebx
    vmovups zmm3, [rcx + rbx*4]
    vmulps zmm3, zmm3, [rdx + rbx*4]
    vaddps zmm3, zmm3, [rsi + rbx*4]
    vmaxps zmm3, zmm3, zmm0
    vfmadd231ps zmm1, zmm3, [rdi + rbx*4]
    vmovups zmm3, [rcx + rbx*4 + 0x40]
    vmulps zmm3, zmm3, [rdx + rbx*4 + 0x40]
    vaddps zmm3, zmm3, [rsi + rbx*4 + 0x40]
    vmaxps zmm3, zmm3, zmm0
    vfmadd231ps zmm2, zmm3, [rdi + rbx*4 + 0x40]
    add r9d, 1
    cmp r9d, 0x80000
    jl 1b
    vaddps zmm0, zmm1, zmm2
    pop rbx
    ret
    .globl gcc_loop
gcc_loop:
    vxorps xmm0, xmm0, xmm0
    vmovaps zmm1, zmm0
    vmovaps zmm2, zmm0
    xor eax, eax
    .p2align 4
1:  vmovups zmm3, [rcx + rax]
    vmovups zmm4, [rcx + rax + 0x40]
    vmulps zmm3, zmm3, [rdx + rax]
    vaddps zmm3, zmm3, [rsi + rax]
    vmaxps zmm3, zmm3, zmm0
    vfmadd231ps zmm1, zmm3, [rdi + rax]
    vmulps zmm4, zmm4, [rdx + rax + 0x40]
    vaddps zmm4, zmm4, [rsi + rax + 0x40]
    vmaxps zmm4, zmm4, zmm0
    vfmadd231ps zmm2, zmm4, [rdi + rax + 0x40]
    sub rax, -128
    cmp rax, 0x4000000
    jne 1b
    vaddps zmm0, zmm1, zmm2
    ret
    .globl reduced_loop
reduced_loop:
    vxorps xmm0, xmm0, xmm0
    vmovaps zmm1, zmm0
    vmovaps zmm2, zmm0
    xor eax, eax
    .p2align 4
1:  vmovups zmm3, [rcx + rax]
    vmulps zmm3, zmm3, [rdx + rax]
    vaddps zmm3, zmm3, [rsi + rax]
    vmaxps zmm3, zmm3, zmm0
    vfmadd231ps zmm1, zmm3, [rdi + rax]
    vmovups zmm3, [rcx + rax + 0x40]
    vmulps zmm3, zmm3, [rdx + rax + 0x40]
    vaddps zmm3, zmm3, [rsi + rax + 0x40]
    vmaxps zmm3, zmm3, zmm0
    vfmadd231ps zmm2, zmm3, [rdi + rax + 0x40]
    add rax, 128
    cmp rax, 0x4000000
    jl 1b
    vaddps zmm0, zmm1, zmm2
    ret
"""

HARNESS = r"""
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
#define N (1 << 24)
typedef float v16 __attribute__((vector_size(64)));
typedef v16 (*loop)(const float *, const float *, const float *, const float *);
v16 renderer_loop(const float *, const float *, const float *, const float *);
v16 gcc_loop(const float *, const float *, const float *, const float *);
v16 reduced_loop(const float *, const float *, const float *, const float *);
#define BODY(off, acc) { __m512 x = _mm512_loadu_ps(d + i + off); x = _mm512_mul_ps(x, _mm512_loadu_ps(c + i + off)); \
  x = _mm512_add_ps(x, _mm512_loadu_ps(b + i + off)); x = _mm512_max_ps(x, z); \
  acc = _mm512_fmadd_ps(x, _mm512_loadu_ps(a + i + off), acc); }
#define AHEAD(name, distance, hint) __attribute__((noinline)) v16 name(const float *a, const float *b, \
  const float *c, const float *d) { __m512 z = _mm512_setzero_ps(), s0 = z, s1 = z; \
  for (long i = 0; i < N; i += 32) { __builtin_prefetch(a + i + distance, 0, hint); \
    __builtin_prefetch(b + i + distance, 0, hint); __builtin_prefetch(c + i + distance, 0, hint); \
    __builtin_prefetch(d + i + distance, 0, hint); BODY(0, s0) BODY(16, s1) } return (v16)_mm512_add_ps(s0, s1); }
AHEAD(ahead256, 64, 3) AHEAD(ahead512, 128, 3) AHEAD(ahead1k, 256, 3) AHEAD(ahead2k, 512, 3) AHEAD(nta4k, 1024, 0)
__attribute__((noinline)) v16 four(const float *a, const float *b, const float *c, const float *d) {
  __m512 z = _mm512_setzero_ps(), s0 = z, s1 = z, s2 = z, s3 = z;
  for (long i = 0; i < N; i += 64) { BODY(0, s0) BODY(16, s1) BODY(32, s2) BODY(48, s3) }
  return (v16)_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)); }
#define BLOCKS(name, block) __attribute__((noinline)) v16 name(const float *a, const float *b, const float *c, \
  const float *d) { __m512 z = _mm512_setzero_ps(), s0 = z, s1 = z; const float *streams[4] = {a, b, c, d}; \
  for (long j = 0; j < N; j += block) { long end = j + 2 * block < N ? j + 2 * block : N; \
    for (int k = 0; k < 4; k++) for (long i = j + block; i < end; i += 16) __builtin_prefetch(streams[k] + i, 0, 3); \
    for (long i = j; i < j + block; i += 32) { BODY(0, s0) BODY(16, s1) } } return (v16)_mm512_add_ps(s0, s1); }
BLOCKS(block4k, 1024) BLOCKS(block16k, 4096) BLOCKS(block64k, 16384)
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 15;
  loop loops[] = {renderer_loop, gcc_loop, reduced_loop, ahead256, ahead512, ahead1k, ahead2k, nta4k, four, block4k,
                  block16k, block64k};
  const char *names[] = {"the x86 renderer's loop", "gcc's loop", "the renderer's, index strength-reduced",
                         "prefetcht0 256 B ahead", "prefetcht0 512 B ahead", "prefetcht0 1 KB ahead",
                         "prefetcht0 2 KB ahead", "prefetchnta 4 KB ahead", "4 accumulators", "4 KB blocks prefetched",
                         "16 KB blocks prefetched", "64 KB blocks prefetched"};
  enum { LOOPS = sizeof(loops) / sizeof(loops[0]) };
  float *streams[4];
  for (int k = 0; k < 4; k++) {
    if (posix_memalign((void **)&streams[k], 2 << 20, N * 4 + 65536)) return 1;
    madvise(streams[k], N * 4 + 65536, 14);  /* MADV_HUGEPAGE, as the CPU allocator does */
    for (long i = 0; i < N + 16384; i++) streams[k][i] = (i % 7) * 0.1f - 0.2f;
  }
  double best[LOOPS]; float sink = 0;
  for (int v = 0; v < LOOPS; v++) best[v] = 1e9;
  for (int call = 0; call < calls; call++) for (int turn = 0; turn < LOOPS; turn++) {
    int v = (turn + call) % LOOPS; double started = now();
    v16 sum = loops[v](streams[0], streams[1], streams[2], streams[3]);
    double took = now() - started; sink += sum[0]; if (took < best[v]) best[v] = took;
  }
  for (int v = 0; v < LOOPS; v++) printf("%s\t%.3f\n", names[v], best[v] * 1e3);
  return sink == 12345.0f;
}
"""


def main() -> None:
    """Build the loops with gcc, run them `--runs` times, print a markdown table of each run's least CPU ms."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=15, help="calls of each loop per run, interleaved")
    parser.add_argument("--runs", type=int, default=3, help="runs (processes)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="x86-reduce-loops-") as folder:
        directory = Path(folder)
        (directory / "loops.S").write_text(ASSEMBLY)
        (directory / "harness.c").write_text(HARNESS)
        subprocess.run(["gcc", "-O2", "-mavx512f", "-mfma", "-Wa,--noexecstack", str(directory / "harness.c"),
                        str(directory / "loops.S"), "-o", str(directory / "loops")], check=True)
        runs = [subprocess.run([str(directory / "loops"), str(arguments.calls)], capture_output=True, text=True,
                               check=False).stdout for _ in range(arguments.runs)]
    tables = [[line.split("\t") for line in run.strip().splitlines()] for run in runs]
    print(f"| loop (least thread CPU ms of {arguments.calls} calls) | " + " | ".join(f"run {n + 1}" for n in
                                                                                  range(len(tables))) + " |")
    print("|---|" + "---|" * len(tables))
    for row, (name, _) in enumerate(tables[0]):
        print(f"| {name} | " + " | ".join(table[row][1] for table in tables) + " |")


if __name__ == "__main__":
    main()
