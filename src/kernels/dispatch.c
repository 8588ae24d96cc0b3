/* dispatch.c -- the one place that chooses kernels: fills the type table's vec_dot from pb_cpu_features(). */
#include "kernels/kernels.h"

void pb_kernels_init(pb_type_traits *table, int n) {
    pb_kernels_fill_ref(table, n);
    unsigned f = pb_cpu_features();
    (void)f; /* ISA files (x86_avx2.c, x86_avx512.c, arm_neon.c) override entries here when present */
}
