/* thermal.c -- thermal governor: reads Linux thermal zones (or a given file, millidegrees C) between
 * tokens and lowers the thread count or pauses when hot. No allocation after init (raw open/read). */
#include "engine/engine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZONE_DIR "/sys/class/thermal"

/* Millidegrees from a sysfs-style file ("45000\n"); false when unreadable or not a number. */
static bool read_mc(const char *path, int *out) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO: no wait for a writer, read gives 0 */
    if (fd < 0) return false;
    char buf[32];
    ssize_t n;
    do n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    char *end;
    long v = strtol(buf, &end, 10);
    if (end == buf || v < -273000 || v > 1000000) return false;
    *out = (int)v;
    return true;
}

pb_status pb_thermal_init(pb_thermal *t, const pb_session_params *p, int n_threads_max) {
    memset(t, 0, sizeof *t);
    t->n_max = n_threads_max;
    t->warm_c = p->thermal_warm_c;
    t->hot_c = p->thermal_hot_c;
    t->hyst_c = p->thermal_hysteresis_c;
    t->pause_cfg_ms = p->thermal_pause_ms;
    t->interval_ms = p->thermal_interval_ms;
    t->t_last_ms = -1;
    atomic_store(&t->n_threads, n_threads_max);
    atomic_store(&t->source, -1);
    const char *mode = p->thermal;
    if (!mode || !*mode || strcmp(mode, "off") == 0) return PB_OK;
    if (!(t->warm_c < t->hot_c) || !(t->hyst_c >= 0) || t->pause_cfg_ms < 0 || t->interval_ms < 0) /* NaN too */
        return pb_error(PB_ERR_INVALID_ARG, "thermal: need warm < hot (%g, %g), hysteresis, pause and interval >= 0",
                        (double)t->warm_c, (double)t->hot_c);
    if (strcmp(mode, "auto") == 0) {
        DIR *d = opendir(ZONE_DIR);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL && t->n_paths < PB_THERMAL_MAX_ZONES) {
            if (strncmp(e->d_name, "thermal_zone", 12) != 0) continue;
            char *path = t->paths[t->n_paths];
            int mc;
            snprintf(path, sizeof t->paths[0], "%s/%.64s/temp", ZONE_DIR, e->d_name);
            if (read_mc(path, &mc)) t->n_paths++;
        }
        if (d) closedir(d);
        t->enabled = t->n_paths > 0; /* no zones (VMs, containers): nothing to govern */
        return PB_OK;
    }
    int mc;
    if (strlen(mode) >= sizeof t->paths[0]) return pb_error(PB_ERR_INVALID_ARG, "thermal: path '%s' is too long", mode);
    if (!read_mc(mode, &mc))
        return pb_error(PB_ERR_NOT_FOUND, "thermal: cannot read a temperature (millidegrees C) from '%s'", mode);
    snprintf(t->paths[0], sizeof t->paths[0], "%s", mode);
    t->n_paths = 1;
    t->enabled = true;
    return PB_OK;
}

static int threads_for(const pb_thermal *t, int level) {
    if (level >= 2) return 1;
    if (level == 1) return t->n_max / 2 > 1 ? t->n_max / 2 : 1;
    return t->n_max;
}

int pb_thermal_tick(pb_thermal *t, pb_pool *pool, bool counting_token) {
    if (!t->enabled) return 0;
    double now = pb_time_ms();
    if (t->t_last_ms < 0 || now - t->t_last_ms >= t->interval_ms) {
        t->t_last_ms = now;
        int hottest = INT32_MIN, src = -1;
        for (int i = 0; i < t->n_paths; i++) {
            int mc;
            if (read_mc(t->paths[i], &mc) && mc > hottest) hottest = mc, src = i;
        }
        if (src >= 0) { /* an unreadable zone keeps the last level */
            float c = (float)hottest / 1000.0f;
            int lvl = atomic_load(&t->level);
            int target = c >= t->hot_c ? 2 : c >= t->warm_c ? 1 : 0;
            if (target >= lvl) {
                lvl = target; /* heat up at once */
            } else {          /* cool down only past the hysteresis band, one threshold at a time */
                while (lvl > 0 && c < (lvl == 2 ? t->hot_c : t->warm_c) - t->hyst_c) lvl--;
            }
            atomic_store(&t->temp_mc, hottest);
            atomic_store(&t->source, src);
            atomic_store(&t->level, lvl);
            atomic_store(&t->n_threads, threads_for(t, lvl));
            atomic_store(&t->pause_ms, lvl >= 2 ? t->pause_cfg_ms : 0);
            pb_pool_set_limit(pool, threads_for(t, lvl));
        }
    }
    if (counting_token && atomic_load(&t->level) > 0) atomic_fetch_add(&t->n_throttled, 1);
    return atomic_load(&t->pause_ms);
}

void pb_thermal_get(const pb_thermal *t, pb_thermal_state *out) {
    pb_thermal *m = (pb_thermal *)t; /* atomics are read-only here */
    memset(out, 0, sizeof *out);
    out->enabled = t->enabled;
    out->temp_c = (float)atomic_load(&m->temp_mc) / 1000.0f;
    out->level = atomic_load(&m->level);
    out->n_threads = atomic_load(&m->n_threads);
    out->n_threads_max = t->n_max;
    out->pause_ms = atomic_load(&m->pause_ms);
    out->n_throttled = atomic_load(&m->n_throttled);
    int src = atomic_load(&m->source);
    if (src < 0 && t->n_paths > 0) src = 0;
    if (src >= 0) snprintf(out->source, sizeof out->source, "%s", t->paths[src]);
}
