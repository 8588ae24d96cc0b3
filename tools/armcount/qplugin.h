/* qplugin.h -- our own declarations of the few entry points of QEMU's stable TCG plugin API (version 1,
 * as qemu 7.2 exports them) that armcount.c uses; Debian does not package qemu-plugin.h. Written from
 * the API documentation (docs/devel/tcg-plugins.rst); only what armcount needs, nothing else. */
#ifndef ARMCOUNT_QPLUGIN_H
#define ARMCOUNT_QPLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* qemu 7.2 refuses a plugin whose exported qemu_plugin_version is above the API version it implements
 * (1 in 7.2); every call below exists unchanged in version 1. */
#define ARMCOUNT_PLUGIN_API 1
#define ARMCOUNT_EXPORT     __attribute__((visibility("default")))

typedef uint64_t qp_id;      /* qemu_plugin_id_t */
typedef uint32_t qp_meminfo; /* qemu_plugin_meminfo_t: packed size/sign/endian/store bits */
struct qemu_plugin_tb;       /* opaque: a translation block being translated */
struct qemu_plugin_insn;     /* opaque: one guest instruction of that block */

typedef struct qp_info { /* qemu_info_t */
    const char *target_name;
    struct {
        int min, cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus, max_vcpus;
        } system;
    } u;
} qp_info;

enum qp_cb_flags { QP_CB_NO_REGS = 0, QP_CB_R_REGS, QP_CB_RW_REGS };
enum qp_mem_rw { QP_MEM_R = 1, QP_MEM_W = 2, QP_MEM_RW = 3 };

typedef void (*qp_udata_cb)(qp_id id, void *udata);
typedef void (*qp_vcpu_udata_cb)(unsigned int vcpu, void *udata);
typedef void (*qp_tb_trans_cb)(qp_id id, struct qemu_plugin_tb *tb);
typedef void (*qp_mem_cb)(unsigned int vcpu, qp_meminfo info, uint64_t vaddr, void *udata);

void qemu_plugin_register_vcpu_tb_trans_cb(qp_id id, qp_tb_trans_cb cb);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qp_vcpu_udata_cb cb, enum qp_cb_flags flags,
                                            void *udata);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, qp_mem_cb cb, enum qp_cb_flags flags,
                                      enum qp_mem_rw rw, void *udata);
void qemu_plugin_register_atexit_cb(qp_id id, qp_udata_cb cb, void *udata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *insn);
unsigned int qemu_plugin_mem_size_shift(qp_meminfo info);
bool qemu_plugin_mem_is_store(qp_meminfo info);
void qemu_plugin_outs(const char *string);

#endif
