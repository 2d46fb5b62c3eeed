/*
 * threads.c - sampled threads and their timers (see threads.h).
 *
 * Context: normal context only (application threads, uploader, fork handlers).
 */
#include "agent/sample/threads.h"
#include "agent/sample/thread_names.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/sample/fork_local.h"
#include "agent/sample/sandbox.h"
#include "common/big_alloc.h"
#include "common/raw_syscall.h"
#include "agent/sample/sampler.h"
#include "agent/unwind/stack_bounds.h"
#include "common/bg_host.h"
#include "common/clock.h"
#include "common/digits.h"
#include "common/u64map.h"
#include "common/log.h"
#include "common/sys_io.h"

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
	bool pending; /* live, its timer not armed yet: threads_service will (deferred) */
	bool arming;  /* threads_service is arming it, registry lock released */
	enum thread_status status;
	uint64_t start_ns; /* pending: CLOCK_MONOTONIC when it registered */
	char name[THREAD_NAME_MAX];
};

/* On the fork-local page when there is one (taken by fork prepare; see fork_local.h). */
static pthread_mutex_t registry_lock_fallback = PTHREAD_MUTEX_INITIALIZER;
FORK_CHILD_DATA static pthread_mutex_t *registry_lock = &registry_lock_fallback;
/* Guarded by registry_lock. The first entries are inline (inline_entries, on the page
 * a fork child writes anyway): a process with a few threads never allocates for them
 * (no heap page touched at start-up), and a fork child starts over there, leaving the
 * parent's array alone (a write to it would copy a page of the heap). */
#define INLINE_ENTRIES 4
FORK_CHILD_DATA static struct thread_entry inline_entries[INLINE_ENTRIES];
FORK_CHILD_DATA static struct thread_entry *entries = inline_entries;
FORK_CHILD_DATA static size_t n_entries, cap_entries = INLINE_ENTRIES;
/* Set at start-up; a fork child arms its timer with them (common/fork_child.h). */
FORK_CHILD_DATA static int timer_signo;
FORK_CHILD_DATA static uint64_t timer_period_ns;
static _Atomic uint64_t timer_failures;
/* threads_scan_existing has finished: from then on only a thread itself arms its timer,
 * after its set-up. Release/acquire pairs the scan's end with threads_start_self. */
static _Atomic bool scan_done;
FORK_CHILD_DATA static uint64_t rng_state; /* guarded by registry_lock */

/*
 * Deferred arming. A timer costs its thread three system calls (create, set, delete: a
 * sizeable share of what creating and joining a thread costs), and most threads of a
 * process that churns them end before their first expiry. So while the
 * uploader thread runs the service (threads_defer_arming), a new thread only registers
 * (pending), and threads_service arms the timers of threads still alive
 * THREADS_ARM_DELAY_NS after they registered. A thread that ends before has its CPU
 * credited by its end account like any thread that ended unsampled (sampler.h), and the
 * first sample of one armed late weighs all its CPU so far: no CPU is lost either way.
 *
 * Waking the service: it publishes when it will next run (service_wake_ns; 0 while it
 * is awake) and the generation of registrations it has seen. A registering thread bumps
 * register_gen, then reads service_wake_ns; the service stores service_wake_ns, then
 * reads register_gen (threads_service_sleep). seq_cst on all four: either the service
 * sees the registration and does not sleep, or the thread sees a sleep too long for it
 * and kicks the service (one system call; only when no other thread is pending, else
 * the service already wakes for that one).
 */
FORK_CHILD_DATA static _Atomic bool defer_on;
FORK_CHILD_DATA static size_t n_pending; /* registry lock: entries with pending set */
/* Diagnostics: timers the service armed; threads that ended while it armed theirs. */
static _Atomic uint64_t deferred_armed, deferred_raced;
/* How long the service keeps looking after the last registration it saw: a thread
 * registering meanwhile needs no kick (it is armed at most this much later). Threads
 * created one after another, each gone before the service runs, cost it a wake-up
 * every SERVICE_LINGER_NS, not one kick each. */
#define SERVICE_LINGER_NS (4 * THREADS_ARM_DELAY_NS)
/* The background host (common/bg_host.h) whose service arms deferred timers, and the
 * service's id there. */
static struct bg_host *defer_host;
static unsigned defer_id;
static _Atomic uint64_t service_wake_ns;
static _Atomic uint64_t register_gen;
static uint64_t service_gen_seen; /* the service's thread only */
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
	/* getrandom, not a clock read (its code and vDSO pages are start-up cost for a
	 * process that never reads the time), nor rdtsc (a process may be set to fault on
	 * it: PR_SET_TSC), nor AT_RANDOM (glibc's stack canary and pointer guard: the
	 * first expiries are visible in profiles). */
	uint64_t seed = 0;
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = (uint64_t)(uintptr_t)&seed; /* no entropy yet: where the stack is */
	rng_state = seed ^ (uint64_t)getpid() ^ 0x9E3779B97F4A7C15ULL;
	return 0;
}

/* tid -> index of its live entry, set when an entry is added and rebuilt when the array
 * is compacted. Lookups validate the index (tid, status), so stale keys are harmless;
 * without it every thread start scanned every entry, ended ones included, which made
 * creating many threads quadratic between two reaps. */
static struct u64map live_index;
FORK_CHILD_DATA static bool live_index_broken; /* a put failed (ENOMEM): scan instead */
/* The index is not used yet: at start-up (no allocation for a process with few
 * threads), and in a fork child, where it holds the parent's threads (clearing it would
 * copy its pages, shared with the parent, on the fork path). Lookups scan the few
 * entries until there are LIVE_INDEX_LAZY_MAX of them, or until the next reap. */
FORK_CHILD_DATA static bool live_index_stale = true;
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
		bool inline_array = entries == inline_entries;
		struct thread_entry *e =
		    big_realloc(inline_array ? NULL : entries, cap * sizeof(*e));
		if (!e)
			return NULL;
		if (inline_array)
			memcpy(e, inline_entries, n_entries * sizeof(*e));
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

/* Creates the timer of tid and arms it, first expiry after first ns of its CPU: from
 * now (after_now: tid is another thread, which may have used CPU already and may end
 * meanwhile; one system call more), or from 0 (the calling thread, which just
 * started). credit (with after_now: a thread the start-up scan found): its first sample
 * also weighs the CPU it used until now (SAMPLER_COOKIE_CREDIT, up to
 * SAMPLER_PRESTART_CREDIT_MAX_NS). No registry state: the caller may or may not hold
 * the lock. 0 or a negative errno; after_now: -ESRCH when tid is no thread of ours any
 * more (not a failure: it ended). */
/* Sampling stopped for good (threads_stop_sampling): no timer is armed any more. A
 * flag, relaxed; read on a fork child's path: on the page it touches anyway. */
FORK_CHILD_DATA static _Atomic bool sampling_stopped;

FORK_CHILD_PATH static int arm_timer(pid_t tid, uint64_t first, bool after_now, bool credit,
				     timer_t *out)
{
	if (atomic_load_explicit(&sampling_stopped, memory_order_relaxed))
		return -ECANCELED;
	int flags = 0;
	void *value = NULL;
	if (after_now) {
		struct timespec cpu;
		if (clock_gettime(THREAD_CPU_CLOCK(tid), &cpu) != 0)
			return -ESRCH; /* EINVAL: no such thread */
		uint64_t used = timespec_ns(&cpu);
		first += used;
		flags = TIMER_ABSTIME; /* on its CPU clock: exact whatever it runs meanwhile */
		if (credit && used <= SAMPLER_PRESTART_CREDIT_MAX_NS)
			value = sampler_timer_value(first, SAMPLER_COOKIE_CREDIT);
	}
	if (!value)
		value = sampler_timer_value(first, SAMPLER_COOKIE);
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = timer_signo;
	sev.sigev_value.sival_ptr = value;
	sev._sigev_un._tid = tid;
	/* The kernel's calls, not libc's timer_create and timer_settime: a fork child
	 * arms its timer here, and libc's timer_create is on a code page the child would
	 * touch for nothing else (common/raw_syscall.h). For a SIGEV_THREAD_ID timer, libc's
	 * timer_t is the kernel's timer id (a non-negative int): timer_delete takes it. */
	int kid;
	long rc = raw_syscall(SYS_timer_create, THREAD_CPU_CLOCK(tid), (long)&sev, (long)&kid, 0);
	if (rc < 0) {
		if (after_now && rc == -EINVAL)
			return -ESRCH; /* it ended since the clock read */
		atomic_fetch_add_explicit(&timer_failures, 1, memory_order_relaxed);
		return (int)rc;
	}
	*out = (timer_t)(intptr_t)kid;
	struct itimerspec its;
	its.it_value.tv_sec = (time_t)(first / 1000000000ULL);
	its.it_value.tv_nsec = (long)(first % 1000000000ULL);
	its.it_interval.tv_sec = (time_t)(timer_period_ns / 1000000000ULL);
	its.it_interval.tv_nsec = (long)(timer_period_ns % 1000000000ULL);
	rc = raw_syscall(SYS_timer_settime, kid, flags, (long)&its, 0);
	if (rc < 0) {
		raw_syscall(SYS_timer_delete, kid, 0, 0, 0);
		if (after_now && rc == -ESRCH)
			return -ESRCH; /* it ended since timer_create */
		atomic_fetch_add_explicit(&timer_failures, 1, memory_order_relaxed);
		return (int)rc;
	}
	return 0;
}

/* Registry lock held. The first expiry: random in (0, period]. */
FORK_CHILD_PATH static uint64_t first_expiry(void)
{
	return 1 + rng_next() % timer_period_ns;
}

/* Registry lock held. Creates and arms the timer of e->tid. self: e is the calling
 * thread (exact: see sampler_thread_armed); else a thread the start-up scan found,
 * whose CPU so far its first sample adds. */
FORK_CHILD_PATH static int arm_locked(struct thread_entry *e, bool self, bool exact)
{
	if (self)
		sampler_thread_armed(exact);
	int rc = arm_timer(e->tid, first_expiry(), !self, !self, &e->timer);
	e->has_timer = rc == 0;
	return rc;
}

/* Registry lock held. */
FORK_CHILD_PATH static void clear_pending(struct thread_entry *e)
{
	if (e->pending)
		n_pending--;
	e->pending = false;
}

/* Registry lock held. A thread registering itself under a tid the registry still holds
 * as live: the tid was reused after a thread ended without telling us (one we did not
 * create, before the next reap). Its timer followed the dead task; this one gets its
 * own. */
FORK_CHILD_PATH static void forget_stale_locked(pid_t tid)
{
	struct thread_entry *stale = find_live(tid);
	if (!stale)
		return;
	if (stale->has_timer)
		timer_delete(stale->timer);
	stale->has_timer = false;
	clear_pending(stale);
	stale->arming = false; /* threads_service finds it ended and deletes its timer */
	stale->status = THREAD_ENDED;
}

/* Registry lock held, or the only thread of a fork child in its fork handler. */
FORK_CHILD_PATH static int start_tid_locked(pid_t tid, bool self, bool exact)
{
	int rc = 0;
	if (self)
		forget_stale_locked(tid);
	if (!find_live(tid)) {
		struct thread_entry *e = add_locked(tid);
		rc = e ? arm_locked(e, self, exact) : -ENOMEM;
		/* A new thread's name is read later: before each upload and when it ends
		 * (threads_exit_self), not here: one system call less per thread start. */
		if (e && rc != 0)
			n_entries--; /* e is the last entry: drop it */
		else if (e && !self)
			thread_names_read(tid, e->name);
	}
	return rc;
}

static int start_tid(pid_t tid, bool self, bool exact)
{
	pthread_mutex_lock(registry_lock);
	int rc = start_tid_locked(tid, self, exact);
	pthread_mutex_unlock(registry_lock);
	return rc;
}

/* The calling thread (exact) registers for threads_service to arm its timer. */
static int register_pending(pid_t tid)
{
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	pthread_mutex_lock(registry_lock);
	forget_stale_locked(tid);
	struct thread_entry *e = add_locked(tid);
	bool kick = false;
	if (e) {
		e->pending = true;
		n_pending++;
		e->start_ns = now;
		sampler_thread_armed(true);
		/* seq_cst, both: pairs with threads_service_sleep's store of
		 * service_wake_ns then load of register_gen (see defer_on). Under the lock:
		 * a service that reads this generation under it also sees e. */
		atomic_fetch_add_explicit(&register_gen, 1, memory_order_seq_cst);
		kick = atomic_load_explicit(&service_wake_ns, memory_order_seq_cst) >
		       now + THREADS_ARM_DELAY_NS + SERVICE_LINGER_NS;
	}
	pthread_mutex_unlock(registry_lock);
	if (kick && defer_host)
		bg_host_kick(defer_host, defer_id); /* outside the registry lock */
	return e ? 0 : -ENOMEM;
}

int threads_start_self(bool is_main, size_t stack_size)
{
	pid_t tid = sampler_gettid();
	struct stack_range r = {0, 0};
	stack_bounds_self(is_main, stack_size, &r);
	sampler_thread_setup(tid, r.lo, r.hi,
			     !atomic_load_explicit(&scan_done, memory_order_acquire));
	/* Acquire pairs with the release in threads_defer_arming: defer_host is set. */
	int rc = !is_main && atomic_load_explicit(&defer_on, memory_order_acquire)
		     ? register_pending(tid)
		     : start_tid(tid, true, !is_main);
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
		/* Pending: it never had a timer (the cheap end of a short thread). Being
		 * armed: threads_service finds it gone and deletes the new timer. */
		clear_pending(e);
		e->arming = false;
		/* The CPU no sample covered (its timer is gone: no handler runs any more). */
		sampler_thread_end(root);
		/* Last chance to learn the name: /proc forgets it with the thread. Only a
		 * thread with samples needs one (one system call less for the others). */
		if (sampler_thread_sampled()) {
			e->status = THREAD_ENDED;
			raw_syscall(SYS_prctl, PR_GET_NAME, (long)e->name, 0, 0);
		} else {
			remove_locked(e);
		}
	}
	pthread_mutex_unlock(registry_lock);
}

/* A linux_dirent64 record, as getdents64 fills it. */
struct dirent64_rec {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

int threads_scan_existing(void)
{
	/* No thread was ever created (glibc clears the flag at the first pthread_create,
	 * and the threads of an earlier constructor could only come from there): nothing
	 * to scan, and reading the directory would be a noticeable share of a short
	 * program's start-up (BENCHMARKS.md, Start-up). */
	if (__libc_single_threaded) {
		/* Release pairs with the acquire in threads_start_self. */
		atomic_store_explicit(&scan_done, true, memory_order_release);
		return 0;
	}
	/* getdents64 into a buffer on the stack rather than opendir, whose 32 KiB buffer
	 * is the first heap the process touches (start-up cost: /bin/true's pages). */
	int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	pid_t self = sampler_gettid();
	int armed = 0;
	bool others = false;
	char buf[1024] __attribute__((aligned(8)));
	long n;
	while ((n = raw_syscall(SYS_getdents64, fd, (long)buf, sizeof(buf), 0)) > 0) {
		for (long off = 0; off < n;) {
			const struct dirent64_rec *de = (const void *)(buf + off);
			off += de->reclen;
			if (de->name[0] < '0' || de->name[0] > '9')
				continue;
			pid_t tid = (pid_t)digits_value(de->name, NULL);
			if (tid == self)
				continue;
			if (!others) {
				/* Threads we did not create: the handler finds their stacks
				 * in a snapshot of the mappings, taken only when such
				 * threads exist. */
				stack_bounds_snapshot();
				others = true;
			}
			if (start_tid(tid, false, false) == 0)
				armed++;
		}
	}
	close(fd);
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

/* Most threads threads_service arms per call: it releases the registry's lock while it
 * makes their system calls, so thread starts and ends never wait for a long batch. */
#define SERVICE_BATCH 32

uint64_t threads_service(uint64_t now)
{
	struct {
		pid_t tid;
		uint64_t first;
		timer_t timer;
		int rc;
	} due[SERVICE_BATCH];
	size_t n = 0;
	uint64_t oldest = UINT64_MAX;
	pthread_mutex_lock(registry_lock);
	/* Under the lock: every registration this generation counts is in entries. */
	uint64_t gen = atomic_load_explicit(&register_gen, memory_order_relaxed);
	bool registrations = gen != service_gen_seen;
	service_gen_seen = gen;
	for (size_t i = 0; i < n_entries && n_pending > 0; i++) {
		struct thread_entry *e = &entries[i];
		if (e->status != THREAD_LIVE || !e->pending || e->arming)
			continue;
		if (e->start_ns + THREADS_ARM_DELAY_NS > now || n == SERVICE_BATCH) {
			oldest = e->start_ns < oldest ? e->start_ns : oldest;
			continue;
		}
		e->arming = true;
		due[n].tid = e->tid;
		due[n].first = first_expiry();
		n++;
	}
	pthread_mutex_unlock(registry_lock);
	for (size_t i = 0; i < n; i++)
		due[i].rc = arm_timer(due[i].tid, due[i].first, true, false, &due[i].timer);
	/* Nothing pending but threads came since the last call: a process creating
	 * short threads one after another (most end before the service runs). Another
	 * look a little later, so that the next ones need no kick. */
	uint64_t idle = registrations ? now + SERVICE_LINGER_NS : UINT64_MAX;
	if (n == 0)
		return oldest == UINT64_MAX ? idle : oldest + THREADS_ARM_DELAY_NS;
	pthread_mutex_lock(registry_lock);
	for (size_t i = 0; i < n; i++) {
		/* By tid: entries move when others are removed. Gone (it ended meanwhile,
		 * or its tid is another thread's now): the new timer is ours to delete. */
		struct thread_entry *e = find_live(due[i].tid);
		bool ours = e && e->pending && e->arming;
		if (ours) {
			clear_pending(e);
			e->arming = false;
		}
		if (ours && due[i].rc == 0) {
			e->timer = due[i].timer;
			e->has_timer = true;
			atomic_fetch_add_explicit(&deferred_armed, 1, memory_order_relaxed);
		} else if (due[i].rc == 0) {
			timer_delete(due[i].timer);
			atomic_fetch_add_explicit(&deferred_raced, 1, memory_order_relaxed);
		} else if (ours && due[i].rc == -ESRCH) {
			/* Its entry says it lives, the kernel that it ended: it left without
			 * threads_exit_self (a raw exit system call), or is leaving now.
			 * Forgotten once the kernel has no such task, else tried again. */
			if (raw_syscall(SYS_tgkill, getpid(), e->tid, 0, 0) == -ESRCH) {
				e->status = THREAD_ENDED;
			} else {
				e->pending = true;
				n_pending++;
				e->start_ns = now;
				oldest = now < oldest ? now : oldest;
			}
		}
		/* Any other error is counted (timer_failures): the thread goes unsampled,
		 * its end still credits its CPU. */
	}
	pthread_mutex_unlock(registry_lock);
	if (n == SERVICE_BATCH)
		return now; /* maybe more due than one batch: again at once */
	return oldest == UINT64_MAX ? idle : oldest + THREADS_ARM_DELAY_NS;
}

bool threads_service_sleep(uint64_t wake_ns)
{
	/* seq_cst, both: pairs with register_pending (see defer_on). */
	atomic_store_explicit(&service_wake_ns, wake_ns, memory_order_seq_cst);
	return atomic_load_explicit(&register_gen, memory_order_seq_cst) == service_gen_seen;
}

void threads_service_awake(void)
{
	/* Relaxed: the service runs before it sleeps again; a thread that reads the old
	 * time kicks once more than needed. */
	atomic_store_explicit(&service_wake_ns, 0, memory_order_relaxed);
}

bool threads_service_wanted(void)
{
	return atomic_load_explicit(&register_gen, memory_order_relaxed) != service_gen_seen;
}

void threads_defer_arming(struct bg_host *h, unsigned id)
{
	/* Written only while defer_on is false, or with the value they have: a thread
	 * that read defer_on true may be kicking. */
	if (h && (defer_host != h || defer_id != id)) {
		defer_host = h;
		defer_id = id;
	}
	/* Release pairs with the acquire in threads_start_self: defer_host is set. */
	atomic_store_explicit(&defer_on, h != NULL, memory_order_release);
}

void threads_refresh_names(void)
{
	pthread_mutex_lock(registry_lock);
	for (size_t i = 0; i < n_entries; i++)
		if (entries[i].status == THREAD_LIVE)
			thread_names_read(entries[i].tid, entries[i].name);
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

void threads_snapshot_names(struct thread_names *out)
{
	out->v = NULL;
	out->n = 0;
	pthread_mutex_lock(registry_lock);
	struct thread_name *v = n_entries ? big_malloc(n_entries * sizeof(*v)) : NULL;
	size_t n = 0;
	for (size_t i = 0; v && i < n_entries; i++) {
		const struct thread_entry *e = &entries[i];
		if (!e->name[0])
			continue;
		v[n].tid = e->tid;
		v[n].live = e->status == THREAD_LIVE;
		memcpy(v[n].name, e->name, THREAD_NAME_MAX);
		n++;
	}
	pthread_mutex_unlock(registry_lock);
	if (v)
		thread_names_adopt(out, v, n);
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

uint64_t threads_deferred_armed(void)
{
	return atomic_load_explicit(&deferred_armed, memory_order_relaxed);
}

uint64_t threads_deferred_raced(void)
{
	return atomic_load_explicit(&deferred_raced, memory_order_relaxed);
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
	entries = inline_entries;
	cap_entries = INLINE_ENTRIES;
	n_entries = 0;
	n_pending = 0;
	/* Its threads arm their own timers until its own uploader thread runs the
	 * service (the parent's does not serve this process). */
	atomic_store_explicit(&defer_on, false, memory_order_relaxed);
	live_index_stale = true;
	live_index_broken = false;
	fork_local_mutex_after_fork(registry_lock);
	/* Not sampler_gettid (see sampler.h); none under a seccomp filter (sandbox.h): the
	 * child is then not sampled (threads_atfork_child_arm is skipped too). */
	child_tid = sandbox_thread_active() ? 0 : sampler_gettid_uncached();
	sampler_after_fork_child(child_tid);
	/* Every child of the same parent would otherwise draw the same first expiry (the
	 * parent's generator does not move when it forks): mix in the child's tid. */
	rng_state ^= (uint64_t)child_tid * 0x9E3779B97F4A7C15ULL;
	rng_next();
}

void threads_stop_sampling(void)
{
	pthread_mutex_lock(registry_lock);
	atomic_store_explicit(&sampling_stopped, true, memory_order_relaxed);
	for (size_t i = 0; i < n_entries; i++) {
		if (entries[i].has_timer)
			timer_delete(entries[i].timer);
		entries[i].has_timer = false;
	}
	pthread_mutex_unlock(registry_lock);
}

FORK_CHILD_PATH pid_t threads_fork_child_pid(void)
{
	return child_tid;
}

FORK_CHILD_PATH void threads_atfork_child_arm(void)
{
	/* Same thread, same stack: the cached stack bounds stay right; only the tid and
	 * the timer are new. No lock: this is the child's only thread, and the lock is
	 * on the fork-local page, which a child that never samples then never touches
	 * (a page fault less per child). */
	int rc = start_tid_locked(child_tid, true, false);
	if (rc < 0)
		log_debug("cannot arm the CPU timer in the fork child: %s", strerror(-rc));
}
