/* test_engine_stop.c -- stop-string matcher (split across pieces, held text released, never emitted), Gemma 4's
 * thought channel split from the answer, and the thermal governor driven by a fake temperature file. No model
 * needed. */
#include "engine/engine.h"
#include "pb_test.h"

#include <stdio.h>

typedef struct sink {
    char text[16384];
    size_t n;
    int calls;
    int stop_after; /* callback returns false after this many calls (0 = never) */
} sink;

static bool on_piece(const char *p, size_t n, void *user) {
    sink *k = user;
    if (k->n + n >= sizeof k->text) return false;
    memcpy(k->text + k->n, p, n);
    k->n += n;
    k->text[k->n] = 0;
    k->calls++;
    return !(k->stop_after && k->calls >= k->stop_after);
}

/* Feeds the pieces, then flushes when no stop was hit; returns the sink's text. */
static const char *run(const char *const *stops, int n_stops, const char *const *pieces, int n_pieces, sink *k,
                       pb_stopper *st) {
    static char buf[PB_STOP_BUF_CAP];
    memset(k, 0, sizeof *k);
    pb_stopper_init(st, buf, sizeof buf, stops, n_stops, on_piece, k);
    bool go = true;
    for (int i = 0; i < n_pieces && go; i++) go = pb_stopper_push(st, pieces[i], strlen(pieces[i]));
    if (go) pb_stopper_flush(st);
    return k->text;
}

static void write_temp(const char *path, int mc) {
    FILE *f = fopen(path, "w");
    fprintf(f, "%d\n", mc);
    fclose(f);
}

/* Gemma 4's thought channel: ids (open 100, close 101, anything else a text token) with their text; what the
 * answer and the thought receive, as decode_loop routes them. */
static void channel_case(const int32_t *ids, const char *const *texts, int n, const char *want_answer,
                         const char *want_thought, const char *what) {
    static sink ans, th;
    memset(&ans, 0, sizeof ans);
    memset(&th, 0, sizeof th);
    pb_channel c;
    pb_channel_init(&c, 100, 101, on_piece, &th);
    for (int i = 0; i < n; i++) {
        if (pb_channel_marker(&c, ids[i])) continue;
        if (pb_channel_inside(&c))
            pb_channel_push(&c, texts[i], strlen(texts[i]));
        else
            on_piece(texts[i], strlen(texts[i]), &ans);
    }
    CHECK(strcmp(ans.text, want_answer) == 0 && strcmp(th.text, want_thought) == 0,
          "channel: %s: answer [%s] thought [%s]", what, ans.text, th.text);
}

int main(void) {
    sink k;
    pb_stopper st;
    {
        const int32_t a[] = {100, 7, 8, 9, 101, 10, 11};
        const char *at[] = {"", "thought", "\nI weigh", " it", "", "The", " answer"};
        channel_case(a, at, 7, "The answer", "I weigh it", "name line dropped, thought apart from the answer");
        const int32_t b[] = {100, 7, 8, 9, 101, 10};
        const char *bt[] = {"", "tho", "ught\nx", "y\nz", "", "ok"};
        channel_case(b, bt, 6, "ok", "xy\nz", "name split over tokens, only its first newline ends it");
        const int32_t c[] = {100, 7, 101, 10};
        const char *ct[] = {"", "thought\n", "", "hi"};
        channel_case(c, ct, 4, "hi", "", "empty thought block (thinking off on larger models)");
        const int32_t d[] = {5, 6};
        const char *dt[] = {"no ", "channel"};
        channel_case(d, dt, 2, "no channel", "", "no markers: all answer");
    }
    {
        const char *stops[] = {"<END>"};
        const char *pieces[] = {"Hello wor", "ld <E", "N", "D> never"};
        CHECK(strcmp(run(stops, 1, pieces, 4, &k, &st), "Hello world ") == 0 && st.hit_stop,
              "stop string split over three pieces is found and not emitted: '%s'", k.text);
    }
    {
        const char *stops[] = {"<END>"};
        const char *pieces[] = {"a <E", "NX b", " <", "EN"};
        CHECK(strcmp(run(stops, 1, pieces, 4, &k, &st), "a <ENX b <EN") == 0 && !st.hit_stop,
              "text that only looked like a stop is released (also at the end): '%s'", k.text);
    }
    {
        const char *stops[] = {"<END>"};
        const char *pieces[] = {"abc <E"};
        sink k2;
        pb_stopper s2;
        static char buf[PB_STOP_BUF_CAP];
        memset(&k2, 0, sizeof k2);
        pb_stopper_init(&s2, buf, sizeof buf, stops, 1, on_piece, &k2);
        pb_stopper_push(&s2, pieces[0], strlen(pieces[0]));
        CHECK(strcmp(k2.text, "abc ") == 0, "a possible stop prefix is held back while it may complete: '%s'", k2.text);
    }
    {
        const char *stops[] = {"Observation:", "\n\n", "ob"};
        const char *pieces[] = {"x", "yz\n", "o", "b"};
        CHECK(strcmp(run(stops, 3, pieces, 4, &k, &st), "xyz\n") == 0 && st.hit_stop,
              "several stops: the earliest wins ('%s')", k.text);
    }
    {
        const char *stops[] = {"é!"};
        const char *pieces[] = {"caf", "é", "!", "x"};
        CHECK(strcmp(run(stops, 1, pieces, 4, &k, &st), "caf") == 0, "UTF-8 stop string: '%s'", k.text);
        const char *p2[] = {"cafés"};
        CHECK(strcmp(run(stops, 1, p2, 1, &k, &st), "cafés") == 0, "UTF-8 prefix released whole: '%s'", k.text);
    }
    {
        const char *stops[] = {"STOP"};
        const char *pieces[] = {"STOP"};
        CHECK(run(stops, 1, pieces, 1, &k, &st)[0] == 0 && k.calls == 0 && st.hit_stop,
              "a stop at the very start emits nothing");
        const char *p2[] = {"no stops here"};
        CHECK(strcmp(run(NULL, 0, p2, 1, &k, &st), "no stops here") == 0 && k.calls == 1,
              "without stop strings text passes straight through");
    }
    {
        /* a long piece (larger than the buffer) is emitted whole and a stop at its end found */
        static char big[10000];
        memset(big, 'a', sizeof big - 1);
        memcpy(big + sizeof big - 6, "STOP!", 5);
        const char *stops[] = {"STOP"};
        const char *pieces[] = {big};
        run(stops, 1, pieces, 1, &k, &st);
        CHECK(st.hit_stop && k.n == sizeof big - 6, "stop found at the end of a 10 kB piece, text before it emitted");
    }
    {
        const char *stops[] = {"zz"};
        const char *pieces[] = {"a", "b", "c", "d"};
        memset(&k, 0, sizeof k);
        static char buf[PB_STOP_BUF_CAP];
        k.stop_after = 2;
        pb_stopper_init(&st, buf, sizeof buf, stops, 1, on_piece, &k);
        int pushed = 0;
        for (int i = 0; i < 4 && pb_stopper_push(&st, pieces[i], 1); i++) pushed++;
        CHECK(st.hit_callback && pushed == 1 && strcmp(k.text, "ab") == 0, "callback false stops the stream");
    }
    {
        const char *bad[] = {""};
        CHECK(pb_stopper_check(bad, 1) == PB_ERR_INVALID_ARG, "empty stop string rejected: %s", pb_last_error());
        static char longs[PB_STOP_MAX_LEN + 2];
        memset(longs, 'x', sizeof longs - 1);
        const char *bad2[] = {longs};
        CHECK(pb_stopper_check(bad2, 1) == PB_ERR_INVALID_ARG, "over-long stop string rejected");
        const char *good[] = {"a", "bc"};
        CHECK(pb_stopper_check(good, 2) == PB_OK, "valid stop strings accepted");
    }

    /* ---- thermal governor with a fake zone file ---- */
    {
        char path[] = "/tmp/pb_thermal_XXXXXX";
        int fd = mkstemp(path);
        close(fd);
        write_temp(path, 50000);
        pb_pool *pool;
        pb_pool_new(4, &pool);
        pb_session_params sp = pb_session_default_params();
        sp.thermal = path;
        sp.thermal_interval_ms = 0;
        sp.thermal_pause_ms = 30;
        pb_thermal t;
        CHECK(pb_thermal_init(&t, &sp, 4) == PB_OK && t.enabled, "governor reads a fake zone file");
        int pause = pb_thermal_tick(&t, pool, true);
        pb_thermal_state ts;
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 0 && ts.n_threads == 4 && pause == 0 && pb_pool_limit(pool) == 4 && ts.temp_c == 50.0f,
              "50 C: cool, 4 threads, no pause (level %d, %d threads, %.1f C)", ts.level, ts.n_threads,
              (double)ts.temp_c);
        write_temp(path, 78000);
        pause = pb_thermal_tick(&t, pool, true);
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 1 && ts.n_threads == 2 && pb_pool_limit(pool) == 2 && pause == 0,
              "78 C: warm, threads halved (level %d, pool limit %d)", ts.level, pb_pool_limit(pool));
        write_temp(path, 91000);
        pause = pb_thermal_tick(&t, pool, true);
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 2 && ts.n_threads == 1 && pb_pool_limit(pool) == 1 && pause == 30 && ts.pause_ms == 30,
              "91 C: hot, one thread and a 30 ms pause (level %d, pause %d)", ts.level, pause);
        write_temp(path, 82000); /* below hot but inside the 5 C hysteresis band */
        pb_thermal_tick(&t, pool, true);
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 2, "82 C after hot: stays hot (hysteresis), level %d", ts.level);
        write_temp(path, 79000);
        pb_thermal_tick(&t, pool, true);
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 1 && pb_pool_limit(pool) == 2 && ts.pause_ms == 0, "79 C: back to warm, pauses end");
        write_temp(path, 72000);
        pb_thermal_tick(&t, pool, true);
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 1, "72 C: still warm inside the band (level %d)", ts.level);
        write_temp(path, 60000);
        pb_thermal_tick(&t, pool, true);
        pb_thermal_get(&t, &ts);
        CHECK(ts.level == 0 && ts.n_threads == 4 && pb_pool_limit(pool) == 4,
              "60 C: cool again, all 4 threads restored");
        CHECK(ts.n_throttled == 5, "tokens counted while throttled: %lld", (long long)ts.n_throttled);
        CHECK(strcmp(ts.source, path) == 0, "state names the file read");
        /* interval: no re-read before it passes */
        sp.thermal_interval_ms = 100000;
        pb_thermal t2;
        pb_thermal_init(&t2, &sp, 4);
        pb_thermal_tick(&t2, pool, false);
        write_temp(path, 95000);
        pb_thermal_tick(&t2, pool, false);
        pb_thermal_get(&t2, &ts);
        CHECK(ts.level == 0, "the file is not re-read before thermal_interval_ms");
        /* a file that holds no number is refused at set-up */
        FILE *f = fopen(path, "w");
        fputs("hot!\n", f);
        fclose(f);
        sp.thermal_interval_ms = 0;
        pb_thermal t3;
        CHECK(pb_thermal_init(&t3, &sp, 4) == PB_ERR_NOT_FOUND, "a file without a number is rejected: %s",
              pb_last_error());
        sp.thermal = "/nonexistent/temp";
        CHECK(pb_thermal_init(&t3, &sp, 4) == PB_ERR_NOT_FOUND, "a missing file is rejected");
        sp.thermal = "off";
        CHECK(pb_thermal_init(&t3, &sp, 4) == PB_OK && !t3.enabled && pb_thermal_tick(&t3, pool, true) == 0,
              "off: disabled");
        sp.thermal = "auto";
        CHECK(pb_thermal_init(&t3, &sp, 4) == PB_OK, "auto: ok (%d zones found)", t3.n_paths);
        sp.thermal = path;
        sp.thermal_warm_c = 90;
        sp.thermal_hot_c = 80;
        CHECK(pb_thermal_init(&t3, &sp, 4) == PB_ERR_INVALID_ARG, "warm >= hot rejected");
        pb_pool_set_limit(pool, 0);
        CHECK(pb_pool_limit(pool) == 1, "pool limit clamps to 1");
        pb_pool_set_limit(pool, 99);
        CHECK(pb_pool_limit(pool) == 4, "pool limit clamps to the size");
        pb_pool_free(pool);
        unlink(path);
    }
    TEST_DONE();
}
