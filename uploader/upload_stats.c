/*
 * upload_stats.c - the uploader's counters (see upload_stats.h).
 *
 * Context: any thread, normal context; relaxed atomics throughout (independent
 * counters, read only for diagnostics).
 */
#include "upload_stats.h"

#include "agent/sample/fork_local.h"
#include "common/log.h"

/* A fork child resets them: on the page its handlers write anyway (fork_local.h). */
FORK_CHILD_DATA struct upload_counters upload_counters;

void upload_stats_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

void upload_stats_outcome_add(struct outcomes *o, bool ok, unsigned failed_attempts,
			      uint64_t bytes_sent)
{
	if (o->n >= MAX_EXPORTERS)
		return;
	o->ok[o->n] = ok;
	o->failed_attempts[o->n] = failed_attempts;
	o->bytes_sent[o->n] = bytes_sent;
	o->delivered += ok;
	o->n++;
}

void upload_stats_tally(const struct outcomes *o)
{
	struct upload_counters *c = &upload_counters;
	for (size_t i = 0; i < o->n; i++) {
		upload_stats_count(o->ok[i] ? &c->uploads_ok : &c->uploads_dropped, 1);
		if (!o->ok[i])
			upload_stats_count(&c->export_failures, 1);
		upload_stats_count(&c->uploads_failed, o->failed_attempts[i]);
		upload_stats_count(&c->bytes_sent, o->bytes_sent[i]);
	}
}

static uint64_t get(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

void upload_stats_get(struct uploader_stats *out)
{
	/* Each counter is read on its own; they need not agree with each other. */
	struct upload_counters *c = &upload_counters;
	out->profiles_exported = get(&c->exported);
	out->export_failures = get(&c->export_failures);
	out->serialize_failures = get(&c->serialize_failures);
	out->samples = get(&c->samples);
	out->dropped_samples = get(&c->dropped);
	out->bytes_exported = get(&c->bytes);
	out->last_serialize_ns = get(&c->serialize_ns);
	out->uploads_ok = get(&c->uploads_ok);
	out->uploads_failed = get(&c->uploads_failed);
	out->uploads_dropped = get(&c->uploads_dropped);
	out->bytes_sent = get(&c->bytes_sent);
}

FORK_CHILD_PATH void upload_stats_reset(void)
{
	struct upload_counters *c = &upload_counters;
	_Atomic uint64_t *const all[] = {
	    &c->exported,	&c->export_failures, &c->serialize_failures, &c->samples,
	    &c->dropped,	&c->bytes,	     &c->serialize_ns,	     &c->uploads_ok,
	    &c->uploads_failed, &c->uploads_dropped, &c->bytes_sent,	     &c->short_skipped,
	};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		atomic_store_explicit(all[i], 0, memory_order_relaxed);
}

void upload_stats_log(void)
{
	struct uploader_stats s;
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	upload_stats_get(&s);
	log_debug("diagnostics: samples=%llu dropped_samples=%llu profiles_exported=%llu "
		  "uploads_ok=%llu uploads_failed=%llu uploads_dropped=%llu bytes_sent=%llu "
		  "short_profiles_not_sent=%llu",
		  (unsigned long long)s.samples, (unsigned long long)s.dropped_samples,
		  (unsigned long long)s.profiles_exported, (unsigned long long)s.uploads_ok,
		  (unsigned long long)s.uploads_failed, (unsigned long long)s.uploads_dropped,
		  (unsigned long long)s.bytes_sent,
		  (unsigned long long)atomic_load_explicit(&upload_counters.short_skipped,
							   memory_order_relaxed));
}
