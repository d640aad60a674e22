/* What writing a large output into fresh memory costs (docs/performance.md, "Outputs handed
 * over"): per round, the mean of 5 repetitions of (a) malloc 64 MiB, memcpy a warm 64 MiB
 * into it, free; (b) the same with madvise(MADV_HUGEPAGE) over the buffer's whole 2 MiB
 * pages before the copy; (c) memcpy into one buffer kept across repetitions. Three rounds.
 * glibc serves allocations this large with mmap and returns them with munmap, so (a) and
 * (b) fault in every page each time; (b) needs transparent huge pages at `madvise` or
 * `always` (/sys/kernel/mm/transparent_hugepage/enabled). Left out: threads, NUMA.
 *
 *   cc -O2 tools/fresh_pages.c -o /tmp/fresh_pages && /tmp/fresh_pages
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

volatile char sink;

int main(void) {
    const size_t n = (size_t)64 << 20, huge = (size_t)2 << 20;
    char *src = malloc(n), *keep = malloc(n);
    if (!src || !keep) return 1;
    memset(src, 1, n);
    memset(keep, 0, n);
    for (int round = 0; round < 3; round++) {
        double t = now_ms();
        for (int i = 0; i < 5; i++) {
            char *d = malloc(n);
            if (!d) return 1;
            memcpy(d, src, n);
            sink += d[n / 2 + i];
            __asm__ volatile("" ::"r"(d) : "memory");
            free(d);
        }
        double fresh = (now_ms() - t) / 5;
        t = now_ms();
        for (int i = 0; i < 5; i++) {
            char *d = malloc(n);
            if (!d) return 1;
            uintptr_t s = ((uintptr_t)d + huge - 1) & ~(uintptr_t)(huge - 1);
            uintptr_t e = ((uintptr_t)d + n) & ~(uintptr_t)(huge - 1);
            if (e > s) madvise((void *)s, e - s, MADV_HUGEPAGE);
            memcpy(d, src, n);
            sink += d[n / 2 + i];
            __asm__ volatile("" ::"r"(d) : "memory");
            free(d);
        }
        double thp = (now_ms() - t) / 5;
        t = now_ms();
        for (int i = 0; i < 5; i++) {
            memcpy(keep, src, n);
            sink += keep[n / 2 + i];
            __asm__ volatile("" ::"r"(keep) : "memory");
        }
        double reused = (now_ms() - t) / 5;
        printf("64 MiB copy: fresh 4 KiB pages %.2f ms, fresh huge pages %.2f ms, reused %.2f ms\n",
               fresh, thp, reused);
    }
    return 0;
}
