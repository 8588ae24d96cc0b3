/* x86_avx2.c -- the x86 kernels (x86_kern.h) built for AVX2 + FMA + F16C (Makefile ISA_FLAGS). Only
 * dispatch.c calls into here, and only when pb_cpu_features() reports those features. */
#define X86_SFX avx2
#include "kernels/x86_kern.h"
#include "kernels/x86_pack2.h"
