/* x86_avx512.c -- the x86 kernels (x86_kern.h) built for AVX-512 F/BW/VL/DQ/VNNI (Makefile ISA_FLAGS):
 * the same code as x86_avx2.c, with vpdpbusd for byte dot products and 32 vector registers for tiles.
 * Only dispatch.c calls into here, and only when pb_cpu_features() reports all of those features. */
#define X86_SFX avx512
#include "kernels/x86_kern.h"
#include "kernels/x86_pack.h"
