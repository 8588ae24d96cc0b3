/* test_base.c -- base room: errors, atomic files, thread pool, CPU detection. */
#include "base/base.h"
#include "pb_test.h"

#include <stdatomic.h>
#include <sys/stat.h>

static atomic_int hits[8];
static void count_fn(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)nth;
    atomic_fetch_add(&hits[ith], 1);
}

int main(void) {
    pb_status s = pb_error(PB_ERR_FORMAT, "gguf: field %s at offset %d", "x", 12);
    CHECK(s == PB_ERR_FORMAT && strcmp(pb_last_error(), "gguf: field x at offset 12") == 0, "pb_error sets text");
    CHECK(strcmp(pb_status_name(PB_ERR_IO), "PB_ERR_IO") == 0, "status names");

    const char *path = "build-test-atomic.bin";
    pb_atomic_file f;
    CHECK(pb_atomic_open(path, &f) == PB_OK, "atomic open");
    pb_atomic_write(&f, "hello", 5);
    struct stat st;
    CHECK(stat(path, &st) != 0, "target absent before commit");
    pb_atomic_abort(&f);
    CHECK(stat(path, &st) != 0, "abort leaves no file");
    CHECK(pb_atomic_open(path, &f) == PB_OK && pb_atomic_write(&f, "hello", 5) == PB_OK &&
              pb_atomic_commit(&f) == PB_OK,
          "atomic commit");
    CHECK(stat(path, &st) == 0 && st.st_size == 5, "committed file has the bytes");
    unlink(path);
    CHECK(pb_atomic_open("/nonexistent-dir/x", &f) == PB_ERR_IO, "atomic open in missing dir fails cleanly");

    pb_pool *pool;
    CHECK(pb_pool_new(4, &pool) == PB_OK, "pool new");
    for (int it = 0; it < 1000; it++) pb_pool_run(pool, count_fn, NULL);
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= hits[i] == 1000;
    CHECK(ok, "pool ran every part of 1000 jobs exactly once");
    pb_pool_run_n(pool, 2, count_fn, NULL);
    CHECK(hits[0] == 1001 && hits[1] == 1001 && hits[2] == 1000, "pool_run_n uses only n threads");
    pb_pool_free(pool);
    pb_pool_free(NULL);

    CHECK(pb_cpu_physical_cores() >= 1, "physical cores >= 1 (%d)", pb_cpu_physical_cores());
    NOTE("cpu features 0x%x", pb_cpu_features());
    CHECK(pb_mem_available() > 0, "mem available known (%zu MiB)", pb_mem_available() >> 20);
    TEST_DONE();
}
