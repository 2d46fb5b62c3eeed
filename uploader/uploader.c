/*
 * uploader.c - the uploader thread (see uploader.h).
 *
 * Context: the uploader thread runs upload_cycle; start/stop/flush are called from
 * application threads and only touch the control block under ctl.lock, which is never
 * held across serialization or I/O (so a fork's prepare handler can take it at once).
 */
#include "uploader.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent/symbolizer.h"
#include "agent/threads.h"
#include "agent/sampler.h"
#include "common/clock.h"
#include "common/log.h"
#include "uploader/exporter.h"
#include "uploader/pprof.h"

#define MAX_EXPORTERS 4
#define UPLOADER_THREAD_NAME "ddprof-upload"

struct control {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	bool running;
	bool stop; /* final upload, then exit */
	bool done; /* thread has finished */
	uint64_t flush_requested; /* generation counters */
	uint64_t flush_completed;
};

static struct control ctl;
static const struct config *up_cfg;
static struct profile_pair *up_profiles;
static thread_create_fn up_create;
static struct exporter *exporters[MAX_EXPORTERS];
static size_t n_exporters;
static uint64_t export_seq;

static _Atomic uint64_t st_exported, st_export_failures, st_serialize_failures, st_samples,
	st_dropped, st_bytes, st_serialize_ns;

static void control_init(void)
{
	pthread_mutex_init(&ctl.lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ctl.cond, &ca);
	pthread_condattr_destroy(&ca);
	ctl.running = ctl.stop = ctl.done = false;
	ctl.flush_requested = ctl.flush_completed = 0;
}

static void build_comments(struct pprof_meta *meta, char buf[][CONFIG_TAG_MAX + 16])
{
	const struct {
		const char *key, *val;
	} tags[] = { { "service", up_cfg->service },
		     { "env", up_cfg->env },
		     { "version", up_cfg->version } };
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
		if (!tags[i].val[0])
			continue;
		snprintf(buf[meta->ncomments], CONFIG_TAG_MAX + 16, "%s:%s", tags[i].key,
			 tags[i].val);
		meta->comments[meta->ncomments] = buf[meta->ncomments];
		meta->ncomments++;
	}
	if (up_cfg->tags[0])
		meta->comments[meta->ncomments++] = up_cfg->tags;
}

/* Uploader thread: one swap, serialize, export. */
static void upload_cycle(struct symbolizer *sym, struct pb_buf *gz)
{
	uint64_t now = clock_now_ns(CLOCK_REALTIME);
	struct profile *p = profiles_swap(up_profiles, now);
	uint64_t samples = atomic_load_explicit(&p->samples, memory_order_relaxed);
	if (samples > 0) {
		uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
		struct pprof_meta meta = { .start_ns = p->start_ns,
					   .end_ns = now,
					   .period_ns = sampler_period_ns(),
					   .pid = getpid() };
		char comment_buf[3][CONFIG_TAG_MAX + 16];
		build_comments(&meta, comment_buf);
		symbolizer_refresh(sym);
		threads_refresh_names();
		struct pprof_stats ps;
		int rc = pprof_build(p, &meta, sym, gz, &ps);
		atomic_store_explicit(&st_serialize_ns, clock_now_ns(CLOCK_MONOTONIC) - t0,
				      memory_order_relaxed);
		atomic_fetch_add_explicit(&st_samples, samples, memory_order_relaxed);
		atomic_fetch_add_explicit(
			&st_dropped,
			atomic_load_explicit(&p->dropped_samples, memory_order_relaxed),
			memory_order_relaxed);
		if (rc < 0) {
			atomic_fetch_add_explicit(&st_serialize_failures, 1,
						  memory_order_relaxed);
			log_warn("cannot serialize the profile: %s", strerror(-rc));
		} else {
			struct export_item item = { gz->data, gz->len, meta.start_ns, now,
						    meta.pid, export_seq++ };
			bool all_ok = true;
			for (size_t i = 0; i < n_exporters; i++) {
				int erc = exporters[i]->send(exporters[i], &item);
				if (erc < 0) {
					all_ok = false;
					atomic_fetch_add_explicit(&st_export_failures, 1,
								  memory_order_relaxed);
					log_warn("%s exporter failed: %s", exporters[i]->name,
						 strerror(-erc));
				}
			}
			if (all_ok && n_exporters > 0) {
				atomic_fetch_add_explicit(&st_exported, 1, memory_order_relaxed);
				atomic_fetch_add_explicit(&st_bytes, gz->len,
							  memory_order_relaxed);
			}
			log_debug("profile %llu: %llu samples, %zu stacks, %zu locations, "
				  "%zu bytes gz",
				  (unsigned long long)item.seq, (unsigned long long)samples,
				  ps.samples, ps.locations, ps.gz_bytes);
		}
	}
	profile_reset(p);
	/* After serialization: names of threads that ended this period were still
	 * needed above. */
	threads_reap();
}

static void *uploader_main(void *arg)
{
	(void)arg;
	sampler_thread_mark_internal();
	prctl(PR_SET_NAME, UPLOADER_THREAD_NAME);
	struct symbolizer *sym = symbolizer_new();
	struct pb_buf gz;
	pb_init(&gz);
	uint64_t period = up_cfg->upload_period_ns;
	uint64_t next = clock_now_ns(CLOCK_MONOTONIC) + period;
	pthread_mutex_lock(&ctl.lock);
	for (;;) {
		while (!ctl.stop && ctl.flush_requested == ctl.flush_completed &&
		       clock_now_ns(CLOCK_MONOTONIC) < next) {
			struct timespec ts = clock_ns_to_timespec(next);
			pthread_cond_timedwait(&ctl.cond, &ctl.lock, &ts);
		}
		bool final = ctl.stop;
		uint64_t flush_gen = ctl.flush_requested;
		pthread_mutex_unlock(&ctl.lock);

		if (sym)
			upload_cycle(sym, &gz);

		uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
		while (next <= now)
			next += period; /* a missed period is skipped, not made up */
		pthread_mutex_lock(&ctl.lock);
		ctl.flush_completed = flush_gen;
		if (final) {
			ctl.done = true;
			pthread_cond_broadcast(&ctl.cond);
			break;
		}
		pthread_cond_broadcast(&ctl.cond);
	}
	pthread_mutex_unlock(&ctl.lock);
	pb_free(&gz);
	symbolizer_free(sym);
	return NULL;
}

static int spawn_thread(void)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* Block every signal in the new thread: the app's signals go to its own threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t;
	int rc = up_create(&t, &attr, uploader_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc == 0)
		ctl.running = true;
	return -rc;
}

int uploader_start(const struct config *cfg, struct profile_pair *pp, thread_create_fn create)
{
	up_cfg = cfg;
	up_profiles = pp;
	up_create = create;
	control_init();
	n_exporters = 0;
	if (cfg->output_dir[0]) {
		struct exporter *e = export_file_new(cfg->output_dir);
		if (e)
			exporters[n_exporters++] = e;
	}
	if (n_exporters == 0)
		log_info("no exporter configured (set DD_PROFILING_OUTPUT_DIR): profiles are "
			 "collected and discarded");
	return spawn_thread();
}

/* Waits, lock held, until pred or the deadline. */
static bool wait_until(uint64_t deadline, bool (*pred)(uint64_t), uint64_t arg)
{
	while (!pred(arg)) {
		if (clock_now_ns(CLOCK_MONOTONIC) >= deadline)
			return false;
		struct timespec ts = clock_ns_to_timespec(deadline);
		pthread_cond_timedwait(&ctl.cond, &ctl.lock, &ts);
	}
	return true;
}

static bool is_done(uint64_t unused)
{
	(void)unused;
	return ctl.done;
}

static bool flushed(uint64_t gen)
{
	return ctl.flush_completed >= gen || ctl.done;
}

void uploader_stop(uint64_t timeout_ns)
{
	pthread_mutex_lock(&ctl.lock);
	if (ctl.running && !ctl.stop) {
		ctl.stop = true;
		pthread_cond_broadcast(&ctl.cond);
		if (!wait_until(clock_now_ns(CLOCK_MONOTONIC) + timeout_ns, is_done, 0))
			log_warn("the final profile was not written within %llu ms; dropped",
				 (unsigned long long)(timeout_ns / 1000000));
	}
	pthread_mutex_unlock(&ctl.lock);
}

int uploader_flush(uint64_t timeout_ns)
{
	int rc = 0;
	pthread_mutex_lock(&ctl.lock);
	if (!ctl.running || ctl.done) {
		rc = -ESRCH;
	} else {
		uint64_t gen = ++ctl.flush_requested;
		pthread_cond_broadcast(&ctl.cond);
		if (!wait_until(clock_now_ns(CLOCK_MONOTONIC) + timeout_ns, flushed, gen))
			rc = -ETIMEDOUT;
	}
	pthread_mutex_unlock(&ctl.lock);
	return rc;
}

void uploader_get_stats(struct uploader_stats *out)
{
	out->profiles_exported = atomic_load_explicit(&st_exported, memory_order_relaxed);
	out->export_failures = atomic_load_explicit(&st_export_failures, memory_order_relaxed);
	out->serialize_failures =
		atomic_load_explicit(&st_serialize_failures, memory_order_relaxed);
	out->samples = atomic_load_explicit(&st_samples, memory_order_relaxed);
	out->dropped_samples = atomic_load_explicit(&st_dropped, memory_order_relaxed);
	out->bytes_exported = atomic_load_explicit(&st_bytes, memory_order_relaxed);
	out->last_serialize_ns = atomic_load_explicit(&st_serialize_ns, memory_order_relaxed);
}

void uploader_atfork_prepare(void)
{
	/* Never held across I/O: this waits for at most a few instructions. */
	pthread_mutex_lock(&ctl.lock);
}

void uploader_atfork_parent(void)
{
	pthread_mutex_unlock(&ctl.lock);
}

void uploader_atfork_child(void)
{
	bool was_running = ctl.running && !ctl.stop;
	/* Fresh control block: the old one's lock is held by this thread (prepare) and
	 * its waiters live in the parent. */
	control_init();
	export_seq = 0;
	atomic_store_explicit(&st_exported, 0, memory_order_relaxed);
	atomic_store_explicit(&st_samples, 0, memory_order_relaxed);
	atomic_store_explicit(&st_bytes, 0, memory_order_relaxed);
	if (was_running && spawn_thread() != 0)
		log_warn("cannot start the uploader thread in the fork child %d", (int)getpid());
}
