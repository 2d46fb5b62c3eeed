/*
 * threads.c - sampled threads and their timers (see threads.h).
 *
 * Context: normal context only (application threads, uploader, fork handlers).
 */
#include "threads.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "agent/fork_local.h"
#include "agent/sampler.h"
#include "agent/stack_bounds.h"
#include "common/hashmap.h"
#include "common/log.h"

/* clockid of another thread's CPU clock, as the kernel encodes it
 * (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) in include/linux/posix-timers.h). */
#define CPUCLOCK_PERTHREAD_MASK 4
#define CPUCLOCK_SCHED 2
#define THREAD_CPU_CLOCK(tid)                                                                      \
	((clockid_t)((~(unsigned)(tid)) << 3) | CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED)

#define REGISTRY_MIN_CAP 64

enum thread_status { THREAD_LIVE, THREAD_ENDED };

struct thread_entry {
	pid_t tid;
	timer_t timer;
	bool has_timer;
	enum thread_status status;
	char name[THREAD_NAME_MAX];
};

/* On the fork-local page when there is one (taken by fork prepare; see fork_local.h). */
static pthread_mutex_t registry_lock_fallback = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *registry_lock = &registry_lock_fallback;
/* Guarded by registry_lock. A fork child starts over on child_entries (on its page):
 * the parent's array is left alone, a write to it would copy a page of the heap. */
#define CHILD_ENTRIES 4
FORK_CHILD_DATA static struct thread_entry *entries;
FORK_CHILD_DATA static size_t n_entries, cap_entries;
FORK_CHILD_DATA static struct thread_entry child_entries[CHILD_ENTRIES];
static int timer_signo;
static uint64_t timer_period_ns;
static _Atomic uint64_t timer_failures;
/* threads_scan_existing has finished: from then on only a thread itself arms its timer,
 * after its set-up. Release/acquire pairs the scan's end with threads_start_self. */
static _Atomic bool scan_done;
FORK_CHILD_DATA static uint64_t rng_state; /* guarded by registry_lock */
/* A fork child's tid, from threads_atfork_child to threads_atfork_child_arm. */
FORK_CHILD_DATA static pid_t child_tid;

static uint64_t rng_next(void)
{
	/* xorshift64*: only spreads first expiries, no need for quality beyond that. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

int threads_init(int signo, uint64_t period_ns)
{
	timer_signo = signo;
	timer_period_ns = period_ns;
	pthread_mutex_t *lock = fork_local_alloc(sizeof(*lock));
	if (lock && pthread_mutex_init(lock, NULL) == 0)
		registry_lock = lock; /* start-up: no other thread of ours uses it yet */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	rng_state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ 0x9E3779B97F4A7C15ULL;
	return 0;
}

/* tid -> index of its live entry, set when an entry is added and rebuilt when the array
 * is compacted. Lookups validate the index (tid, status), so stale keys are harmless;
 * without it every thread start scanned every entry, ended ones included, which made
 * creating many threads quadratic between two reaps. */
static struct u64map live_index;
FORK_CHILD_DATA static bool live_index_broken; /* a put failed (ENOMEM): scan instead */
/* Fork child: the index holds the parent's threads. Clearing it would copy its pages
 * (shared with the parent) on the fork path, so the child scans its few entries and
 * rebuilds the index once it has LIVE_INDEX_LAZY_MAX of them, or at the next reap. */
FORK_CHILD_DATA static bool live_index_stale;
#define LIVE_INDEX_LAZY_MAX 32
/* Keys left behind by removed entries (they fail validation). The index is rebuilt
 * once they outnumber the entries, so a process that churns threads keeps it small. */
static size_t live_index_dead_keys;

/* Registry lock held. */
static struct thread_entry *find_locked(pid_t tid, bool live_only);

/* Registry lock held. The live entry of tid, or NULL. */
FORK_CHILD_PATH static struct thread_entry *find_live(pid_t tid)
{
	if (live_index_broken || live_index_stale)
		return find_locked(tid, true);
	uint64_t i;
	if (tid > 0 && u64map_get(&live_index, (uint64_t)tid, &i) && i < n_entries &&
	    entries[i].tid == tid && entries[i].status == THREAD_LIVE)
		return &entries[i];
	return NULL;
}

/* Registry lock held. */
FORK_CHILD_PATH static void index_rebuild(void)
{
	u64map_clear(&live_index);
	live_index_broken = false;
	live_index_stale = false;
	live_index_dead_keys = 0;
	for (size_t i = 0; i < n_entries; i++)
		if (entries[i].status == THREAD_LIVE && entries[i].tid > 0 &&
		    u64map_put(&live_index, (uint64_t)entries[i].tid, i) < 0)
			live_index_broken = true;
}

/* Registry lock held. */
static struct thread_entry *find_locked(pid_t tid, bool live_only)
{
	for (size_t i = 0; i < n_entries; i++)
		if (entries[i].tid == tid && (!live_only || entries[i].status == THREAD_LIVE))
			return &entries[i];
	return NULL;
}

/* Registry lock held. */
FORK_CHILD_PATH static struct thread_entry *add_locked(pid_t tid)
{
	if (n_entries == cap_entries) {
		size_t cap =
		    cap_entries > REGISTRY_MIN_CAP / 2 ? cap_entries * 2 : REGISTRY_MIN_CAP;
		bool inline_array = entries == child_entries;
		struct thread_entry *e = realloc(inline_array ? NULL : entries, cap * sizeof(*e));
		if (!e)
			return NULL;
		if (inline_array)
			memcpy(e, child_entries, n_entries * sizeof(*e));
		entries = e;
		cap_entries = cap;
	}
	struct thread_entry *e = &entries[n_entries++];
	memset(e, 0, sizeof(*e));
	e->tid = tid;
	e->status = THREAD_LIVE;
	if (live_index_stale && n_entries >= LIVE_INDEX_LAZY_MAX)
		index_rebuild();
	else if (!live_index_stale && tid > 0 &&
		 u64map_put(&live_index, (uint64_t)tid, n_entries - 1) < 0)
		live_index_broken = true;
	return e;
}

/* Registry lock held. Creates and arms the timer of e->tid. self: e is the calling
 * thread (exact: see sampler_thread_armed). */
FORK_CHILD_PATH static int arm_locked(struct thread_entry *e, bool self, bool exact)
{
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = timer_signo;
	sev.sigev_value.sival_int = SAMPLER_COOKIE;
	sev._sigev_un._tid = e->tid;
	if (timer_create(THREAD_CPU_CLOCK(e->tid), &sev, &e->timer) != 0) {
		int err = errno;
		atomic_fetch_add_explicit(&timer_failures, 1, memory_order_relaxed);
		return -err;
	}
	struct itimerspec its;
	uint64_t first = 1 + rng_next() % timer_period_ns; /* (0, period] */
	if (self)
		sampler_thread_armed(first, exact);
	its.it_value.tv_sec = (time_t)(first / 1000000000ULL);
	its.it_value.tv_nsec = (long)(first % 1000000000ULL);
	its.it_interval.tv_sec = (time_t)(timer_period_ns / 1000000000ULL);
	its.it_interval.tv_nsec = (long)(timer_period_ns % 1000000000ULL);
	if (timer_settime(e->timer, 0, &its, NULL) != 0) {
		int err = errno;
		timer_delete(e->timer);
		atomic_fetch_add_explicit(&timer_failures, 1, memory_order_relaxed);
		return -err;
	}
	e->has_timer = true;
	return 0;
}

static bool read_comm(pid_t tid, char out[THREAD_NAME_MAX])
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, out, THREAD_NAME_MAX - 1);
	close(fd);
	if (n <= 0)
		return false;
	out[n] = 0;
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = 0;
	return true;
}

FORK_CHILD_PATH static int start_tid(pid_t tid, bool self, bool exact)
{
	int rc = 0;
	pthread_mutex_lock(registry_lock);
	struct thread_entry *stale = self ? find_live(tid) : NULL;
	if (stale) {
		/* A thread registering itself under a tid the registry still holds as live:
		 * the tid was reused after a thread we did not create ended (before the
		 * next reap). Its timer followed the dead task; give this one its own. */
		if (stale->has_timer)
			timer_delete(stale->timer);
		stale->has_timer = false;
		stale->status = THREAD_ENDED;
	}
	if (!find_live(tid)) {
		struct thread_entry *e = add_locked(tid);
		rc = e ? arm_locked(e, self, exact) : -ENOMEM;
		/* A new thread's name is read later: before each upload and when it ends
		 * (threads_exit_self), not here: one system call less per thread start. */
		if (e && rc != 0)
			n_entries--; /* e is the last entry: drop it */
		else if (e && !self)
			read_comm(tid, e->name);
	}
	pthread_mutex_unlock(registry_lock);
	return rc;
}

int threads_start_self(bool is_main, size_t stack_size)
{
	pid_t tid = sampler_gettid();
	struct stack_range r = {0, 0};
	stack_bounds_self(is_main, stack_size, &r);
	sampler_thread_setup(tid, r.lo, r.hi,
			     !atomic_load_explicit(&scan_done, memory_order_acquire));
	int rc = start_tid(tid, true, !is_main);
	if (rc < 0)
		log_debug("cannot arm the CPU timer of thread %d: %s", (int)tid, strerror(-rc));
	return rc;
}

/* Registry lock held. Drops e (swapping the last entry into its place): a thread that
 * ended without samples needs no name, so a process creating thousands of threads per
 * upload period keeps only its live and its sampled threads. */
FORK_CHILD_PATH static void remove_locked(struct thread_entry *e)
{
	size_t i = (size_t)(e - entries);
	size_t last = n_entries - 1;
	if (i != last) {
		entries[i] = entries[last];
		if (!live_index_stale && !live_index_broken && entries[i].status == THREAD_LIVE &&
		    entries[i].tid > 0 && u64map_put(&live_index, (uint64_t)entries[i].tid, i) < 0)
			live_index_broken = true;
	}
	n_entries = last;
	if (!live_index_stale && ++live_index_dead_keys > n_entries + REGISTRY_MIN_CAP)
		index_rebuild();
}

FORK_CHILD_PATH void threads_exit_self(const struct sampler_thread_root *root)
{
	pid_t tid = sampler_gettid();
	pthread_mutex_lock(registry_lock);
	struct thread_entry *e = find_live(tid);
	if (e) {
		if (e->has_timer)
			timer_delete(e->timer);
		e->has_timer = false;
		/* The CPU no sample covered (its timer is gone: no handler runs any more). */
		sampler_thread_end(root);
		/* Last chance to learn the name: /proc forgets it with the thread. Only a
		 * thread with samples needs one (one system call less for the others). */
		if (sampler_thread_sampled()) {
			e->status = THREAD_ENDED;
			prctl(PR_GET_NAME, e->name);
		} else {
			remove_locked(e);
		}
	}
	pthread_mutex_unlock(registry_lock);
}

int threads_scan_existing(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -errno;
	pid_t self = sampler_gettid();
	int armed = 0;
	bool others = false;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		pid_t tid = (pid_t)atoi(de->d_name);
		if (tid == self)
			continue;
		if (!others) {
			/* Threads we did not create: the handler finds their stacks in a
			 * snapshot of the mappings, taken only when such threads exist. */
			stack_bounds_snapshot();
			others = true;
		}
		if (start_tid(tid, false, false) == 0)
			armed++;
	}
	closedir(d);
	/* Release pairs with the acquire in threads_start_self. */
	atomic_store_explicit(&scan_done, true, memory_order_release);
	return armed;
}

/* A CPU timer whose thread has ended reads as disarmed (it_value 0) even though its
 * interval is set: the kernel clears expiries when the thread exits, and a reused tid
 * is a different task the timer does not follow. */
static bool timer_thread_ended(timer_t t)
{
	struct itimerspec its;
	if (timer_gettime(t, &its) != 0)
		return true;
	return its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0;
}

void threads_reap(void)
{
	pthread_mutex_lock(registry_lock);
	size_t w = 0;
	for (size_t i = 0; i < n_entries; i++) {
		struct thread_entry *e = &entries[i];
		if (e->status == THREAD_ENDED)
			continue; /* ended before the previous reap: samples already out */
		if (e->has_timer && timer_thread_ended(e->timer)) {
			timer_delete(e->timer);
			e->has_timer = false;
			e->status = THREAD_ENDED; /* keep its name for one more upload */
		}
		entries[w++] = *e;
	}
	n_entries = w;
	index_rebuild();
	pthread_mutex_unlock(registry_lock);
}

void threads_refresh_names(void)
{
	pthread_mutex_lock(registry_lock);
	for (size_t i = 0; i < n_entries; i++)
		if (entries[i].status == THREAD_LIVE)
			read_comm(entries[i].tid, entries[i].name);
	pthread_mutex_unlock(registry_lock);
}

bool threads_name(pid_t tid, char out[THREAD_NAME_MAX])
{
	bool found = false;
	pthread_mutex_lock(registry_lock);
	/* Prefer the live entry: an ended entry may carry a reused tid's old name. */
	struct thread_entry *e = find_live(tid);
	if (!e)
		e = find_locked(tid, false);
	if (e && e->name[0]) {
		memcpy(out, e->name, THREAD_NAME_MAX);
		found = true;
	}
	pthread_mutex_unlock(registry_lock);
	return found;
}

size_t threads_count(void)
{
	size_t n = 0;
	pthread_mutex_lock(registry_lock);
	for (size_t i = 0; i < n_entries; i++)
		n += entries[i].has_timer;
	pthread_mutex_unlock(registry_lock);
	return n;
}

size_t threads_registered(void)
{
	pthread_mutex_lock(registry_lock);
	size_t n = n_entries;
	pthread_mutex_unlock(registry_lock);
	return n;
}

uint64_t threads_timer_failures(void)
{
	return atomic_load_explicit(&timer_failures, memory_order_relaxed);
}

void threads_atfork_prepare(void)
{
	pthread_mutex_lock(registry_lock);
}

void threads_atfork_parent(void)
{
	pthread_mutex_unlock(registry_lock);
}

FORK_CHILD_PATH void threads_atfork_child(void)
{
	/* The child has one thread and no timers (POSIX timers are not inherited). We
	 * hold the lock, taken in prepare by this very thread: re-initialize it. */
	entries = child_entries;
	cap_entries = CHILD_ENTRIES;
	n_entries = 0;
	live_index_stale = true;
	live_index_broken = false;
	if (!fork_local_owns(registry_lock)) /* else found zero-filled: unlocked */
		pthread_mutex_init(registry_lock, NULL);
	sampler_after_fork_child();
	/* Every child of the same parent would otherwise draw the same first expiry (the
	 * parent's generator does not move when it forks): mix in the child's tid. */
	child_tid = sampler_gettid_uncached(); /* not sampler_gettid: see sampler.h */
	rng_state ^= (uint64_t)child_tid * 0x9E3779B97F4A7C15ULL;
	rng_next();
}

FORK_CHILD_PATH void threads_atfork_child_arm(void)
{
	/* Same thread, same stack: the cached stack bounds stay right; only the tid and
	 * the timer are new. */
	int rc = start_tid(child_tid, true, false);
	if (rc < 0)
		log_debug("cannot arm the CPU timer in the fork child: %s", strerror(-rc));
}
