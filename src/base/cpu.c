/* cpu.c -- detects CPU features once (cpuid / getauxval / sysctl); PB_CPU env var narrows them for tests. */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned detect(void) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return 0;
    bool osxsave = (c >> 27) & 1;
    if (!osxsave) return 0;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool ymm = (xlo & 6) == 6, zmm = (xlo & 0xe6) == 0xe6;
    if (ymm && ((c >> 12) & 1)) f |= PB_CPU_FMA;
    if (ymm && ((c >> 29) & 1)) f |= PB_CPU_F16C;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    if (ymm && ((b >> 5) & 1)) f |= PB_CPU_AVX2;
    if (zmm) {
        if ((b >> 16) & 1) f |= PB_CPU_AVX512F;
        if ((b >> 17) & 1) f |= PB_CPU_AVX512DQ;
        if ((b >> 30) & 1) f |= PB_CPU_AVX512BW;
        if ((b >> 31) & 1) f |= PB_CPU_AVX512VL;
        if ((c >> 11) & 1) f |= PB_CPU_AVX512VNNI;
    }
    return f;
}
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
/* iOS / macOS have no auxv: the kernel publishes each feature as hw.optional.arm.FEAT_* (1 when present). */
static bool has_sysctl(const char *name) {
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname(name, &v, &n, NULL, 0) == 0 && v == 1;
}
static unsigned detect(void) {
    unsigned f = PB_CPU_NEON;
    if (has_sysctl("hw.optional.arm.FEAT_DotProd")) f |= PB_CPU_DOTPROD;
    if (has_sysctl("hw.optional.arm.FEAT_I8MM")) f |= PB_CPU_I8MM;
    return f;
}
#elif defined(__aarch64__)
#include <sys/auxv.h>
static unsigned detect(void) {
    unsigned f = PB_CPU_NEON;
#ifdef HWCAP_ASIMDDP
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) f |= PB_CPU_DOTPROD;
#endif
    /* HWCAP2_I8MM is bit 13 of AT_HWCAP2 (Linux uapi asm/hwcap.h); older libc headers lack the name */
    if (getauxval(AT_HWCAP2) & (1ul << 13)) f |= PB_CPU_I8MM;
    return f;
}
#else
static unsigned detect(void) { return 0; }
#endif

unsigned pb_cpu_features(void) {
    static unsigned cached;
    static int done;
    if (done) return cached;
    unsigned f = detect();
    const char *want = getenv("PB_CPU");
    if (want) {
        if (strcmp(want, "scalar") == 0)
            f = 0;
        else if (strcmp(want, "dotprod") == 0) /* ARM64 without i8mm: the sdot kernels */
            f &= PB_CPU_NEON | PB_CPU_DOTPROD;
        else if (strcmp(want, "avx2") == 0)
            f &= PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C;
    }
    cached = f;
    done = 1;
    return f;
}

int pb_cpu_physical_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* Count distinct (physical id, core id) pairs from /proc/cpuinfo when available. */
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp) {
        char line[256];
        int phys = -1, pairs[1024][2], np = 0;
        while (fgets(line, sizeof line, fp)) {
            if (strncmp(line, "physical id", 11) == 0)
                phys = atoi(strchr(line, ':') + 1);
            else if (strncmp(line, "core id", 7) == 0) {
                int core = atoi(strchr(line, ':') + 1), seen = 0;
                for (int i = 0; i < np; i++)
                    if (pairs[i][0] == phys && pairs[i][1] == core) seen = 1;
                if (!seen && np < 1024) {
                    pairs[np][0] = phys;
                    pairs[np][1] = core;
                    np++;
                }
            }
        }
        fclose(fp);
        if (np > 0 && np <= n) return np;
    }
    return n > 0 ? (int)n : 1;
}
