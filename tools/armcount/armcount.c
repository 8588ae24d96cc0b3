/* armcount.c -- qemu-aarch64 TCG plugin: counts the guest instructions executed by class (SDOT/UDOT/
 * USDOT, SMMLA/UMMLA/USMMLA, other SIMD/FP, loads/stores, scalar) and the bytes loaded and stored,
 * per guest thread, between markers the program signals; prints one JSON object at exit.
 *
 * Markers (one mode per run):
 *   default      `hint #0x7c` starts counting, `hint #0x7d` stops it (both are NOPs on any ARMv8 CPU)
 *   sym=NAME     every call of function NAME is a region: from the first block of NAME entered by a
 *                call (BL/BLR/B from outside NAME) to the block at the caller's return address
 *   all=on       the whole run is one region
 * A region switches counting on for every thread (workers a region's thread wakes are counted); the
 * per-region numbers are the sum over threads. Other args: out=FILE (JSON there, else qemu's log).
 * Usage: qemu-aarch64 -cpu max -plugin build/armcount/libarmcount.so,sym=llama_decode,out=r.json PROG
 *
 * Only guest work is seen: no caches, no timing, no kernel time; a 16-byte vector load that qemu 7.2
 * splits into two 8-byte accesses is still 16 bytes. Not thread-exact at region edges (other threads
 * are sampled, not stopped). */
#include "qplugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ARMCOUNT_EXPORT int qemu_plugin_version = ARMCOUNT_PLUGIN_API;

enum { C_INSN, C_DOT, C_MMLA, C_SIMD, C_LDST, C_SCALAR, C_BLOAD, C_BSTORE, C_N };
static const char *const c_name[C_N] = {"insns", "dot",    "mmla",         "simd",
                                        "ldst",  "scalar", "bytes_loaded", "bytes_stored"};

#define MAX_VCPU   256
#define MAX_REGION 8192
#define HINT_START 0xD5032F9Fu /* hint #0x7c */
#define HINT_STOP  0xD5032FBFu /* hint #0x7d */

typedef struct tb_info {
    uint64_t vaddr, end; /* first instruction, address after the last */
    int in_sym;          /* the block lies in the symbol of sym= */
    int ends_call;       /* the last instruction is BL, BLR or B (a call or tail call) */
} tb_info;

typedef struct seg {        /* a run of instructions of one block between markers */
    uint64_t n[C_MMLA + 4]; /* C_INSN..C_SCALAR */
    tb_info *tb;            /* set on a block's first segment: block-level bookkeeping runs there */
} seg;

typedef struct vcpu {
    uint64_t c[C_N];
    const tb_info *last; /* block executed before the current one */
    uint64_t ret;        /* sym mode: return address of the open region, 0 when none */
    int used;
} vcpu;

static vcpu g_cpu[MAX_VCPU];
static volatile int g_on;
static int g_mode; /* 0 hint, 1 sym, 2 all */
static const char *g_sym = "";
static const char *g_out;
static uint64_t g_start[C_N];
static uint64_t (*g_region)[C_N];
static int g_n_region, g_dropped;

/* ---- instruction classes (A64 encoding groups, Arm ARM C4.1) --------------------------------- */

static int classify(uint32_t w) {
    if ((w & 0xDFE0F400u) == 0x4E80A400u) return C_MMLA; /* SMMLA, UMMLA, USMMLA (vector) */
    if ((w & 0x9FE0FC00u) == 0x0E809400u) return C_DOT;  /* SDOT, UDOT (vector) */
    if ((w & 0x9FC0F400u) == 0x0F80E000u) return C_DOT;  /* SDOT, UDOT (by element) */
    if ((w & 0xBFE0FC00u) == 0x0E809C00u) return C_DOT;  /* USDOT (vector) */
    if ((w & 0xBF40F400u) == 0x0F00F000u) return C_DOT;  /* SUDOT, USDOT (by element) */
    if ((w & 0x0A000000u) == 0x08000000u) return C_LDST; /* op0 = x1x0: loads and stores, incl. SIMD */
    if ((w & 0x0E000000u) == 0x0E000000u) return C_SIMD; /* op0 = x111: SIMD and FP data processing */
    if ((w & 0x1E000000u) == 0x04000000u) return C_SIMD; /* op0 = 0010: SVE */
    return C_SCALAR;
}

static int is_call(uint32_t w) {
    return (w & 0x7C000000u) == 0x14000000u || /* B, BL */
           (w & 0xFFFFFC1Fu) == 0xD63F0000u;   /* BLR */
}

/* ---- regions ---------------------------------------------------------------------------------- */

static void sum_all(uint64_t out[C_N]) {
    memset(out, 0, sizeof(uint64_t) * C_N);
    for (int v = 0; v < MAX_VCPU; v++)
        if (g_cpu[v].used)
            for (int k = 0; k < C_N; k++) out[k] += g_cpu[v].c[k];
}

static void region_start(void) {
    if (g_on) return;
    sum_all(g_start);
    g_on = 1;
}

static void region_stop(void) {
    if (!g_on) return;
    g_on = 0;
    uint64_t now[C_N];
    sum_all(now);
    if (g_n_region >= MAX_REGION) {
        g_dropped++;
        return;
    }
    for (int k = 0; k < C_N; k++) g_region[g_n_region][k] = now[k] - g_start[k];
    g_n_region++;
}

/* ---- execution callbacks ---------------------------------------------------------------------- */

static vcpu *cpu_of(unsigned int i) {
    if (i >= MAX_VCPU) return NULL;
    g_cpu[i].used = 1;
    return &g_cpu[i];
}

static void on_seg(unsigned int i, void *udata) {
    const seg *s = udata;
    vcpu *v = cpu_of(i);
    if (!v) return;
    if (s->tb) {
        const tb_info *tb = s->tb;
        if (g_mode == 1) {
            if (v->ret && tb->vaddr == v->ret) {
                v->ret = 0;
                region_stop();
            } else if (!v->ret && tb->in_sym && v->last && v->last->ends_call && !v->last->in_sym) {
                v->ret = v->last->end;
                region_start();
            }
        }
        v->last = tb;
    }
    if (!g_on) return;
    for (int k = 0; k <= C_SCALAR; k++) v->c[k] += s->n[k];
}

static void on_marker(unsigned int i, void *udata) {
    if (udata == (void *)1)
        region_start();
    else
        region_stop();
}

static void on_mem(unsigned int i, qp_meminfo info, uint64_t vaddr, void *udata) {
    if (!g_on) return;
    vcpu *v = cpu_of(i);
    if (!v) return;
    v->c[qemu_plugin_mem_is_store(info) ? C_BSTORE : C_BLOAD] += 1u << qemu_plugin_mem_size_shift(info);
}

/* ---- translation ------------------------------------------------------------------------------ */

static uint32_t insn_word(const struct qemu_plugin_insn *insn) {
    uint32_t w = 0;
    if (qemu_plugin_insn_size(insn) == 4) memcpy(&w, qemu_plugin_insn_data(insn), 4);
    return w;
}

static void on_trans(qp_id id, struct qemu_plugin_tb *tb) {
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (n == 0) return;
    tb_info *info = calloc(1, sizeof *info);
    if (!info) return;
    struct qemu_plugin_insn *last = qemu_plugin_tb_get_insn(tb, n - 1);
    info->vaddr = qemu_plugin_tb_vaddr(tb);
    info->end = qemu_plugin_insn_vaddr(last) + qemu_plugin_insn_size(last);
    info->ends_call = is_call(insn_word(last));
    if (g_mode == 1) {
        const char *name = qemu_plugin_insn_symbol(qemu_plugin_tb_get_insn(tb, 0));
        info->in_sym = name && strcmp(name, g_sym) == 0;
    }
    seg *cur = NULL;
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w = insn_word(insn);
        if (g_mode == 0 && (w == HINT_START || w == HINT_STOP)) {
            if (first) { /* block bookkeeping still needs a segment ahead of the marker */
                cur = calloc(1, sizeof *cur);
                if (!cur) return;
                cur->tb = info;
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_seg, QP_CB_NO_REGS, cur);
                first = 0;
            }
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_marker, QP_CB_NO_REGS,
                                                   (void *)(uintptr_t)(w == HINT_START ? 1 : 2));
            cur = NULL;
            continue;
        }
        if (!cur) {
            cur = calloc(1, sizeof *cur);
            if (!cur) return;
            if (first) cur->tb = info;
            first = 0;
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_seg, QP_CB_NO_REGS, cur);
        }
        int c = classify(w);
        cur->n[C_INSN]++;
        cur->n[c]++;
        if (c == C_MMLA) cur->n[C_DOT]++; /* dot counts every int8 dot-product instruction, mmla too */
        if (c == C_LDST) qemu_plugin_register_vcpu_mem_cb(insn, on_mem, QP_CB_NO_REGS, QP_MEM_RW, NULL);
    }
}

/* ---- report ----------------------------------------------------------------------------------- */

static void put_counts(FILE *f, const uint64_t c[C_N]) {
    fputc('{', f);
    for (int k = 0; k < C_N; k++) fprintf(f, "%s\"%s\": %llu", k ? ", " : "", c_name[k], (unsigned long long)c[k]);
    fputc('}', f);
}

static void on_exit_cb(qp_id id, void *udata) {
    region_stop();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    uint64_t tot[C_N] = {0};
    for (int r = 0; r < g_n_region; r++)
        for (int k = 0; k < C_N; k++) tot[k] += g_region[r][k];
    fprintf(f, "{\"mode\": \"%s\", \"symbol\": \"%s\", \"n_regions\": %d, \"dropped_regions\": %d,\n \"total\": ",
            g_mode == 0   ? "hint"
            : g_mode == 1 ? "sym"
                          : "all",
            g_sym, g_n_region, g_dropped);
    put_counts(f, tot);
    fputs(",\n \"threads\": [", f);
    int nt = 0;
    for (int v = 0; v < MAX_VCPU; v++) {
        if (!g_cpu[v].used) continue;
        fprintf(f, "%s\n  {\"vcpu\": %d, \"counts\": ", nt++ ? "," : "", v);
        put_counts(f, g_cpu[v].c);
        fputc('}', f);
    }
    fputs("],\n \"regions\": [", f);
    for (int r = 0; r < g_n_region; r++) {
        fputs(r ? ",\n  " : "\n  ", f);
        put_counts(f, g_region[r]);
    }
    fputs("]}\n", f);
    fclose(f);
    FILE *o = g_out ? fopen(g_out, "w") : NULL;
    if (o) {
        fwrite(buf, 1, len, o);
        fclose(o);
    } else {
        if (g_out) qemu_plugin_outs("armcount: cannot write out= file; report follows\n");
        qemu_plugin_outs(buf);
    }
    free(buf);
}

ARMCOUNT_EXPORT int qemu_plugin_install(qp_id id, const qp_info *info, int argc, char **argv);

int qemu_plugin_install(qp_id id, const qp_info *info, int argc, char **argv) {
    if (info->system_emulation || strcmp(info->target_name, "aarch64") != 0) {
        fprintf(stderr, "armcount: needs qemu-aarch64 (user mode), got %s\n", info->target_name);
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "sym=", 4) == 0 && argv[i][4]) {
            g_mode = 1;
            g_sym = argv[i] + 4;
        } else if (strcmp(argv[i], "all=on") == 0) {
            g_mode = 2;
        } else if (strncmp(argv[i], "out=", 4) == 0 && argv[i][4]) {
            g_out = argv[i] + 4;
        } else {
            fprintf(stderr, "armcount: unknown argument '%s' (sym=NAME, all=on, out=FILE)\n", argv[i]);
            return -1;
        }
    }
    g_region = calloc(MAX_REGION, sizeof *g_region);
    if (!g_region) return -1;
    if (g_mode == 2) g_on = 1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
