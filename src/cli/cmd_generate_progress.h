/* Progress of a `deepinfer generate --input` run on stderr: requests done / total, generated tokens
 * per second and elapsed time. On a terminal one line is redrawn in place (at most 10 times a
 * second); otherwise (a log file, CI) a plain line is written every 10 seconds, so logs stay
 * readable. The end-of-run summary is printed by the command from di_engine_get_stats.
 * (The file name keeps the `cmd_` prefix because src/cli/cmd_*.c is what the build globs.) */
#ifndef DI_CLI_CMD_GENERATE_PROGRESS_H
#define DI_CLI_CMD_GENERATE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct di_progress {
    FILE *f;
    bool tty;
    double t0_s, last_s;   /* start, last draw (monotonic seconds) */
    double interval_s;     /* between draws */
    int total;             /* requests in the input */
    bool drawn;            /* a bar is on the terminal line (to be cleared) */
} di_progress;

void di_progress_init(di_progress *p, FILE *f, int total);
/* Redraws when the interval has passed, or always with `force`. */
void di_progress_update(di_progress *p, int done, int failed, int64_t generated_tokens, bool force);
/* Clears the terminal line (nothing to do in log mode). */
void di_progress_end(di_progress *p);
/* Formats a duration as "12.3 s", "4 min 05 s" or "1 h 02 min". */
void di_progress_format_duration(double seconds, char *buf, size_t cap);

#endif
