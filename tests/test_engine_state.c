/* test_engine_state.c -- session files: save -> load -> continue gives the same tokens as an uninterrupted
 * session (file and memory variants), resumed chat prefills only the new turn, corrupt / truncated /
 * foreign-model / other-KV-type files are rejected with the session untouched, and a failed save never
 * replaces an existing file. */
#include "engine/engine.h"
#include "pb_test.h"

#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

typedef struct text {
    char s[8192];
    size_t n;
} text;

static bool collect(const char *p, size_t n, void *user) {
    text *t = user;
    if (t->n + n < sizeof t->s) {
        memcpy(t->s + t->n, p, n);
        t->n += n;
        t->s[t->n] = 0;
    }
    return true;
}

static pb_session *new_session(pb_model *m, pb_kv_type kv) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    sp.kv_type = kv;
    pb_session *s = NULL;
    if (pb_session_new(m, &sp, &s) != PB_OK) NOTE("session_new: %s", pb_last_error());
    return s;
}

static pb_gen_params sampled(int max_tokens) {
    pb_gen_params gp = pb_gen_default_params(); /* balanced preset, seed 42 */
    gp.sampler.top_k = 0;
    gp.sampler.min_p = 0;
    gp.sampler.temperature = 0.9f;
    gp.max_tokens = max_tokens;
    return gp;
}

static bool same_session(const pb_session *a, const pb_session *b) {
    int64_t na, nb;
    const int32_t *ta = pb_session_tokens(a, &na), *tb = pb_session_tokens(b, &nb);
    return na == nb && memcmp(ta, tb, (size_t)na * 4) == 0 && a->pending == b->pending && a->n_turns == b->n_turns &&
           a->n_keep == b->n_keep;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

int main(void) {
    const char *path = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    const char *path2 = pbt_fixture("model/gemma2-tiny-v.q4_0.gguf");
    if (!path || !path2) TEST_DONE();
    pb_model *m, *m2;
    CHECK(pb_model_open(path, NULL, &m) == PB_OK, "open q8_0 model: %s", pb_last_error());
    CHECK(pb_model_open(path2, NULL, &m2) == PB_OK, "open q4_0 model: %s", pb_last_error());
    char dir[] = "/tmp/pb_state_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    char file[256], file2[256];
    snprintf(file, sizeof file, "%s/chat.pbs", dir);
    snprintf(file2, sizeof file2, "%s/other.pbs", dir);
    pb_gen_params gp = sampled(12);
    pb_gen_stats gs;

    /* ---- uninterrupted reference: three turns ---- */
    pb_session *ref = new_session(m, PB_KV_F16);
    text r1 = {0}, r2 = {0}, r3 = {0};
    pb_session_chat(ref, "Be kind.", "Hello there.", &gp, collect, &r1, &gs);
    pb_session_chat(ref, NULL, "Tell me more.", &gp, collect, &r2, &gs);
    int64_t ref_p2 = gs.n_prompt;
    pb_session_chat(ref, NULL, "Thanks!", &gp, collect, &r3, &gs);

    /* ---- interrupted: save after turn 1, load in a new session, continue ---- */
    pb_session *a = new_session(m, PB_KV_F16);
    text a1 = {0};
    pb_session_chat(a, "Be kind.", "Hello there.", &gp, collect, &a1, &gs);
    CHECK(strcmp(a1.s, r1.s) == 0, "turn 1 identical (seeded sampling)");
    CHECK(pb_session_save(a, file) == PB_OK, "save: %s", pb_last_error());
    struct stat st;
    int stat_rc = stat(file, &st);
    CHECK(stat_rc == 0 && st.st_size > 128, "session file written (%lld bytes)", (long long)st.st_size);
    pb_session_free(a);

    pb_session *b = new_session(m, PB_KV_F16);
    CHECK(pb_session_load(b, file) == PB_OK, "load: %s", pb_last_error());
    text b2 = {0}, b3 = {0};
    pb_session_chat(b, NULL, "Tell me more.", &gp, collect, &b2, &gs);
    CHECK(gs.n_prompt == ref_p2, "resumed turn prefills only its own %lld tokens (no re-prefill of the history)",
          (long long)gs.n_prompt);
    pb_session_totals tot;
    pb_session_get_totals(b, &tot);
    CHECK(tot.n_reprefilled == 0, "nothing re-prefilled after load");
    pb_session_chat(b, NULL, "Thanks!", &gp, collect, &b3, &gs);
    CHECK(strcmp(b2.s, r2.s) == 0 && strcmp(b3.s, r3.s) == 0,
          "save -> load -> continue gives exactly the uninterrupted text ('%s' / '%s')", b3.s, r3.s);
    CHECK(same_session(b, ref), "and exactly the same tokens, turns and pending token");

    /* ---- memory variant, mid-answer (max_tokens stop, token pending), then plain continuation ---- */
    {
        pb_session *c = new_session(m, PB_KV_F16), *d = new_session(m, PB_KV_F16);
        pb_gen_params g5 = sampled(5);
        pb_session_chat(c, NULL, "Write a list.", &g5, NULL, NULL, &gs);
        size_t need = 0, len = 0;
        pb_session_state_size(c, &need);
        CHECK(pb_session_state_write(c, NULL, 0, &len) == PB_ERR_INVALID_ARG && len == need,
              "state_write with no buffer reports the size (%zu)", need);
        void *buf = malloc(need);
        CHECK(pb_session_state_write(c, buf, need, &len) == PB_OK && len == need, "state_write");
        CHECK(pb_session_state_read(d, buf, len) == PB_OK, "state_read: %s", pb_last_error());
        text c1 = {0}, d1 = {0};
        pb_session_generate(c, NULL, 0, &g5, collect, &c1, &gs);
        pb_session_generate(d, NULL, 0, &g5, collect, &d1, &gs);
        CHECK(c1.n > 0 && strcmp(c1.s, d1.s) == 0 && same_session(c, d),
              "continuing a restored mid-answer state gives the same tokens");

        /* ---- corrupt buffers: each rejected, the target session unchanged ---- */
        int64_t before = pb_session_n_past(d);
        uint8_t *bad = malloc(need);
        memcpy(bad, buf, need);
        bad[need / 2] ^= 0x40;
        CHECK(pb_session_state_read(d, bad, need) == PB_ERR_FORMAT && strstr(pb_last_error(), "checksum"),
              "a flipped bit -> checksum error: %s", pb_last_error());
        CHECK(pb_session_state_read(d, buf, need - 7) == PB_ERR_FORMAT, "truncated state rejected: %s",
              pb_last_error());
        memcpy(bad, buf, need);
        bad[0] = 'X';
        CHECK(pb_session_state_read(d, bad, need) == PB_ERR_FORMAT && strstr(pb_last_error(), "not a pocketbrain"),
              "bad magic rejected: %s", pb_last_error());
        memcpy(bad, buf, need);
        bad[8] = 9;
        CHECK(pb_session_state_read(d, bad, need) == PB_ERR_FORMAT && strstr(pb_last_error(), "version"),
              "unknown version rejected: %s", pb_last_error());
        CHECK(pb_session_state_read(d, bad, 10) == PB_ERR_FORMAT, "10-byte state rejected");
        CHECK(pb_session_n_past(d) == before && same_session(c, d), "the session is unchanged by failed reads");
        /* the same corruptions through files */
        memcpy(bad, buf, need);
        bad[need - 3] ^= 1;
        write_file(file2, bad, need);
        CHECK(pb_session_load(d, file2) == PB_ERR_FORMAT && strstr(pb_last_error(), file2),
              "corrupt file rejected, message names it: %s", pb_last_error());
        write_file(file2, "PBSESSN1", 8);
        CHECK(pb_session_load(d, file2) == PB_ERR_FORMAT, "8-byte file rejected: %s", pb_last_error());
        CHECK(pb_session_load(d, "/nonexistent/x.pbs") == PB_ERR_IO, "missing file -> PB_ERR_IO");
        /* a fresh session too small for the state */
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 8;
        sp.n_threads = 1;
        pb_session *tiny;
        pb_session_new(m, &sp, &tiny);
        CHECK(pb_session_state_read(tiny, buf, need) == PB_ERR_MISMATCH && strstr(pb_last_error(), "n_ctx"),
              "state longer than n_ctx -> mismatch: %s", pb_last_error());
        pb_session_free(tiny);
        free(bad);
        free(buf);
        pb_session_free(c);
        pb_session_free(d);
    }

    /* ---- mismatches: another model, another KV type ---- */
    {
        pb_session *o = new_session(m2, PB_KV_F16);
        CHECK(pb_session_load(o, file) == PB_ERR_MISMATCH && strstr(pb_last_error(), "model"),
              "a file from another model is refused: %s", pb_last_error());
        CHECK(pb_session_n_past(o) == 0, "refusing leaves the session empty as it was");
        pb_session_free(o);
        pb_session *q = new_session(m, PB_KV_Q8_0);
        CHECK(pb_session_load(q, file) == PB_ERR_MISMATCH && strstr(pb_last_error(), "KV"),
              "a file with another KV type is refused: %s", pb_last_error());
        pb_session_free(q);
    }

    /* ---- a failed save never replaces the existing file (write fails: file size limit) ---- */
    {
        struct stat before, after;
        stat(file, &before);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = {4096, 4096};
            setrlimit(RLIMIT_FSIZE, &rl);
            pb_status s2 = pb_session_save(b, file); /* b holds more than 4 kB of state */
            _exit(s2 == PB_ERR_IO ? 0 : 1);
        }
        int wst = 0;
        waitpid(pid, &wst, 0);
        CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "save beyond the file size limit fails with PB_ERR_IO");
        stat(file, &after);
        CHECK(after.st_size == before.st_size && after.st_mtime == before.st_mtime && after.st_ino == before.st_ino,
              "the existing session file is untouched");
        pb_session *e = new_session(m, PB_KV_F16);
        CHECK(pb_session_load(e, file) == PB_OK, "and still loads");
        pb_session_free(e);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", dir);
        FILE *p = popen(cmd, "r");
        int n_tmp = -1;
        if (p) {
            if (fscanf(p, "%d", &n_tmp) != 1) n_tmp = -1;
            pclose(p);
        }
        CHECK(n_tmp == 0, "no temp file left behind (%d)", n_tmp);
        char nodir[300];
        snprintf(nodir, sizeof nodir, "%s/missing/dir/x.pbs", dir);
        CHECK(pb_session_save(b, nodir) == PB_ERR_IO && strstr(pb_last_error(), "missing"),
              "save into a missing directory -> PB_ERR_IO: %s", pb_last_error());
    }

    pb_session_free(b);
    pb_session_free(ref);
    unlink(file);
    unlink(file2);
    rmdir(dir);
    pb_model_close(m);
    pb_model_close(m2);
    TEST_DONE();
}
