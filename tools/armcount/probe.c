/* probe.c -- a tiny aarch64 program with a known instruction mix, for tests/test_armcount.sh: a marked
 * loop (hint #0x7c .. hint #0x7d) and an all-assembly function called twice (the sym= mode). */
#include <stdint.h>
#include <stdio.h>

/* probe_sum(p, n): sums n 32-bit words; 1 + 4n + 2 instructions, 4n bytes loaded, nothing stored. */
uint64_t probe_sum(const uint32_t *p, uint64_t n);
__asm__(".text\n.global probe_sum\n.type probe_sum, %function\nprobe_sum:\n"
        "  mov x2, xzr\n"
        "1: ldr w3, [x0], #4\n"
        "  add x2, x2, x3\n"
        "  subs x1, x1, #1\n"
        "  b.ne 1b\n"
        "  mov x0, x2\n"
        "  ret\n"
        ".size probe_sum, .-probe_sum\n");

int main(void) {
    static uint8_t buf[32] __attribute__((aligned(16)));
    static uint64_t sink;
    static uint32_t words[16];
    for (int i = 0; i < 16; i++) words[i] = (uint32_t)i;
    /* 100 iterations of 8 instructions after one mov: 801 instructions, 200 dot (100 of them SMMLA),
     * 100 other SIMD, 300 loads/stores, 201 scalar; 2400 bytes loaded, 800 stored. */
    __asm__ volatile("hint #0x7c\n"
                     "  mov x2, #100\n"
                     "1: ldr q0, [%0]\n"
                     "  ldr x3, [%0, #16]\n"
                     "  sdot v1.4s, v0.16b, v0.16b\n"
                     "  smmla v4.4s, v0.16b, v0.16b\n"
                     "  add v2.4s, v2.4s, v1.4s\n"
                     "  str x3, [%1]\n"
                     "  subs x2, x2, #1\n"
                     "  b.ne 1b\n"
                     "  hint #0x7d\n"
                     :
                     : "r"(buf), "r"(&sink)
                     : "x2", "x3", "v0", "v1", "v2", "v4", "memory", "cc");
    uint64_t s = probe_sum(words, 10) + probe_sum(words, 5);
    printf("probe %llu\n", (unsigned long long)s);
    return s == 45 + 10 ? 0 : 1;
}
