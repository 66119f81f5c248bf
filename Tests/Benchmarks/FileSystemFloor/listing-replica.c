// The system calls of a listing (Keychain.allItems over one service of 10,000 items), replayed in
// C with no crypto and no bookkeeping, next to the benchmark floor's calls: how much of the
// listing's distance from its floor the calls themselves explain. docs/PERFORMANCE.md ("A write
// and a listing") has the figures. The variants alternate, one listing each, 32 rounds (the
// first 2 untimed).
//
//   cc -O2 -o listing-replica listing-replica.c && ./listing-replica /tmp/listing-replica
//
// Makes 10,000 files of 252 bytes (an item with a 32-byte secret) in the directory given, then
// prints the medians: the floor's calls (readdir; for each file open by path, read to the end,
// close), and ours (readdir; for each file openat relative to the directory with O_NOFOLLOW and
// O_NOATIME, fstat, one pread of its size, close), and ours without O_NOATIME.
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { files = 10000, rounds = 32, warmup = 2 };
static char names[files][64];
static int count;
static long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void list_names(const char *directory) {
    DIR *stream = opendir(directory);
    struct dirent *entry;
    count = 0;
    while ((entry = readdir(stream)) != NULL) {
        if (entry->d_name[0] != '.') strcpy(names[count++], entry->d_name);
    }
    closedir(stream);
}

static void floor_calls(const char *directory) {
    char buffer[4096], path[512];
    list_names(directory);
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%s", directory, names[i]);
        int descriptor = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t total = 0, read_now;
        while ((read_now = read(descriptor, buffer + total, sizeof buffer - total)) > 0) total += read_now;
        sink += total;
        close(descriptor);
    }
}

static void our_calls(const char *directory, int directory_descriptor, int no_access_time) {
    char buffer[4096];
    list_names(directory);
    for (int i = 0; i < count; i++) {
        int descriptor = openat(directory_descriptor, names[i],
            O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (no_access_time ? O_NOATIME : 0));
        struct stat status;
        fstat(descriptor, &status);
        sink += pread(descriptor, buffer, status.st_size, 0);
        close(descriptor);
    }
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
        return 2;
    }
    const char *directory = argv[1];
    mkdir(directory, 0700);
    char path[512];
    unsigned char data[252];
    for (int i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/%08x%024x.item", directory, i, 0);
        int descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        for (size_t j = 0; j < sizeof data; j++) data[j] = (unsigned char)rand();
        if (descriptor < 0 || write(descriptor, data, sizeof data) != (ssize_t)sizeof data) {
            perror(path);
            return 1;
        }
        close(descriptor);
    }
    int directory_descriptor = open(directory, O_RDONLY | O_DIRECTORY);
    double floor_times[rounds], our_times[rounds], atime_times[rounds];
    for (int round = 0; round < rounds + warmup; round++) {
        double start = now();
        floor_calls(directory);
        double middle = now();
        our_calls(directory, directory_descriptor, 1);
        double late = now();
        our_calls(directory, directory_descriptor, 0);
        double end = now();
        if (round >= warmup) {
            floor_times[round - warmup] = middle - start;
            our_times[round - warmup] = late - middle;
            atime_times[round - warmup] = end - late;
        }
    }
    qsort(floor_times, rounds, sizeof(double), compare);
    qsort(our_times, rounds, sizeof(double), compare);
    qsort(atime_times, rounds, sizeof(double), compare);
    double floor_median = floor_times[rounds / 2];
    printf("floor's calls %.2f ms; ours %.2f ms (%.2fx); ours without O_NOATIME %.2f ms (%.2fx)\n",
        floor_median * 1e3, our_times[rounds / 2] * 1e3, our_times[rounds / 2] / floor_median,
        atime_times[rounds / 2] * 1e3, atime_times[rounds / 2] / floor_median);
    return 0;
}
