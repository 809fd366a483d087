/* Progress display of `deepinfer generate` (see cmd_generate_progress.h). */
#include "cli/cmd_generate_progress.h"

#include <unistd.h>

#include "base/clock.h"

#define BAR_WIDTH 24
#define TTY_INTERVAL_S 0.1
#define LOG_INTERVAL_S 10.0

void di_progress_init(di_progress *p, FILE *f, int total) {
    *p = (di_progress){.f = f, .tty = isatty(fileno(f)), .total = total};
    p->interval_s = p->tty ? TTY_INTERVAL_S : LOG_INTERVAL_S;
    p->t0_s = p->last_s = di_seconds_now();
}

void di_progress_format_duration(double s, char *buf, size_t cap) {
    if (s < 60) snprintf(buf, cap, "%.1f s", s);
    else if (s < 3600) snprintf(buf, cap, "%d min %02d s", (int)s / 60, (int)s % 60);
    else snprintf(buf, cap, "%d h %02d min", (int)s / 3600, (int)s % 3600 / 60);
}

void di_progress_update(di_progress *p, int done, int failed, int64_t generated_tokens, bool force) {
    const double now = di_seconds_now();
    if (!force && now - p->last_s < p->interval_s) return;
    p->last_s = now;
    const double elapsed = now - p->t0_s;
    const double tok_s = elapsed > 0 ? (double)generated_tokens / elapsed : 0;
    char dur[32], fail[32] = "";
    di_progress_format_duration(elapsed, dur, sizeof dur);
    if (failed) snprintf(fail, sizeof fail, " (%d failed)", failed);
    if (!p->tty) {
        fprintf(p->f, "generate: %d/%d requests%s, %.1f tokens/s, %s\n", done, p->total, fail, tok_s, dur);
        fflush(p->f);
        return;
    }
    char bar[BAR_WIDTH + 1];
    int fill = p->total > 0 ? (int)((int64_t)done * BAR_WIDTH / p->total) : BAR_WIDTH;
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = 0;
    fprintf(p->f, "\r\033[K[%s] %d/%d requests%s  %.1f tokens/s  %s", bar, done, p->total, fail, tok_s, dur);
    fflush(p->f);
    p->drawn = true;
}

void di_progress_end(di_progress *p) {
    if (p->tty && p->drawn) {
        fprintf(p->f, "\r\033[K");
        fflush(p->f);
    }
    p->drawn = false;
}
