/* cli.h -- shared helpers of the pocketbrain CLI (the only code that may exit()). One command per file. */
#ifndef PB_CLI_H
#define PB_CLI_H

#include "pocketbrain.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Each command lives in tools/cmd_<name>.c and defines: int cmd_<name>(int argc, char **argv);
 * argv[0] is the command name. Return the process exit status (0 ok, 1 failure, 2 usage error). */
#define PB_CMD(name) int cmd_##name(int argc, char **argv)
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_ingest(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_ask(int argc, char **argv);
int cmd_faq(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_rm(int argc, char **argv);

/* Prints "pocketbrain <cmd>: <message>" to stderr. */
void cli_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the library's last error for a failed status: "pocketbrain <cmd>: <what>: <pb_last_error()>". */
int cli_fail(const char *cmd, pb_status s, const char *what);
/* "<prefix>: <pb_last_error()>", or the error alone when it already starts with "<prefix>:" (no "session:
 * session:"). The text lives until the next call. */
const char *cli_last_error_as(const char *prefix);
/* The flag matcher of every command: argv[*i] against a flag's name ("--long" or "-s") and alias (another name, or
 * NULL). A flag that takes a value (val not NULL) takes it as "--long=VALUE" or as the next argument ("--long VALUE",
 * "-s VALUE"; *i then moves past it); a switch (val NULL) refuses "--long=VALUE". A short name takes nothing attached:
 * "-s=VALUE" and "-sDIGITS" are usage errors naming it (not another flag: no name has a digit). Returns 1 when argv[*i]
 * is this flag, 0 when not, -1 after a usage error naming it (the value missing, or a value given to a switch or
 * attached to a short name): return 2. */
int cli_flag(const char *cmd, const char *usage, int argc, char **argv, int *i, const char *name, const char *alias,
             const char **val);
/* Usage error naming the flag: prints the message and the command's usage line, returns 2. */
int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints only the "usage: ..." line (after a value parser already said what is wrong); returns 2. */
int cli_usage_line(const char *usage);

/* Flushes stdout: false when what was written could not be (a full disk, a closed descriptor). The first failure's
 * cause is kept: main() ends a command that returned 0 with exit status 1 and a message naming it. */
bool cli_flush_stdout(void);

/* Strict number parsing: false (and a message) when s is not entirely a number in [lo, hi]. flag names the value in
 * the message ("--ctx", or "--ctx=abc" as given: named up to its '='). */
bool cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
/* Unsigned 64-bit (seeds): digits only, 0..2^64-1; negative, overflow and garbage are refused. */
bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
bool cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* Parses sizes like "512M", "2G", "1000000" (bytes). */
bool cli_parse_size(const char *cmd, const char *flag, const char *s, size_t *out);
/* A comma-separated list of integers in [lo, hi] ("1,8,32"): each item plain decimal digits; no sign, blank, empty
 * item ("1,,2", "1,") or more than max items. False after a message naming the flag. */
bool cli_parse_int_list(const char *cmd, const char *flag, const char *s, long lo, long hi, int *out, int max, int *n);
/* A token id: plain decimal digits ("+5", "-0", " 5", "0x5" are not ids) up to INT32_MAX; false otherwise. *end (may
 * be NULL) gets the first byte after the digits. */
bool cli_parse_id(const char *s, int32_t *out, const char **end);

/* In an argv loop of a command that takes operands (a query, a question, a text): an argument that starts with '-'
 * (not "-" alone, stdin, nor "--") is an option (cli_is_option). cli_operand tells, at the loop's top, what arg is:
 * 1 an operand (not an option, or any argument after "--", the end of the options: an operand may start with '-'),
 * 0 an option for the command's flags, -1 the first "--" itself (skip it; *ended records it). */
bool cli_is_option(const char *arg);
int cli_operand(const char *arg, bool *ended);

/* Progress bar on stderr when it is a terminal (no output otherwise). */
typedef struct cli_progress {
    const char *label;
    double t_start;
    int last_pct;
    bool tty;
} cli_progress;
void cli_progress_init(cli_progress *p, const char *label);
void cli_progress_update(cli_progress *p, double done, double total);
void cli_progress_done(cli_progress *p);

/* Path of the default model: $PB_MODEL (a path, or a library name: see lib_resolve), else the embedded
 * models/default.gguf next to the binary's repo (or in the working directory); NULL when none is found. */
const char *cli_default_model(void);

/* llama.cpp's general.file_type value as a name ("Q4_K_M"), "unknown" when not known (tools/cmd_info.c). */
const char *cli_ftype_name(uint32_t ft);

/* Installs handlers for SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ and SIGQUIT that remove the temp files
 * (pb_atomic_cleanup_all), then end the process by the same signal; of the last four, one inherited as
 * ignored (nohup) stays ignored. */
void cli_install_cleanup_handlers(void);

#endif
