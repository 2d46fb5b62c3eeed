/*
 * host_agent.c - the agent's services as the background host runs them (see
 * host_agent.h): adapters from common/bg_host.h's signatures to the agent's service
 * functions, which the uploader's table (uploader/uploader.c) names.
 * Context: the host thread (the uploader's).
 */
#include "uploader/host_agent.h"

#include "agent/agent.h"
#include "agent/alloc/live_heap.h"
#include "agent/sample/threads.h"
#include "agent/store/profiles.h"
#include "agent/unwind/modules.h"
#include "common/bg_host.h"

/* Unwind tables of new modules (agent/unwind/modules.h): when modules_service says it
 * is due, or a dlopen kicks it. */
uint64_t host_agent_modules_run(void *arg, uint64_t now)
{
	(void)arg;
	return modules_service(now);
}

/* Memory for the active profile (agent/store/profiles.h) and the live heap's stacks,
 * mapped off the handlers' path when they ask; the live heap's stack stores compacted
 * when they fill (agent/alloc/live_heap.h). */
uint64_t host_agent_room_run(void *arg, uint64_t now)
{
	struct profile_pair *pp = arg;
	profiles_grow_if_needed(pp);
	live_heap_grow();
	uint64_t next = live_heap_maintain(now, false);
	return next == UINT64_MAX ? BG_NEVER : next;
}

bool host_agent_room_wanted(void *arg)
{
	struct profile_pair *pp = arg;
	return profiles_room_wanted(pp) || live_heap_room_wanted() || live_heap_populate_wanted();
}

/* New threads' timers (agent/sample/threads.h, deferred arming): the CPU a thread uses
 * before its timer is armed goes to its first sample's stack, so they also run between
 * the steps of an upload and during its network waits. */
uint64_t host_agent_threads_run(void *arg, uint64_t now)
{
	(void)arg;
	return threads_service(now);
}

bool host_agent_threads_wanted(void *arg)
{
	(void)arg;
	return threads_service_wanted();
}

bool host_agent_threads_before_sleep(void *arg, uint64_t wake)
{
	(void)arg;
	return threads_service_sleep(wake);
}

void host_agent_threads_after_sleep(void *arg)
{
	(void)arg;
	threads_service_awake();
}

/* The GOT hooks' slots in modules loaded since (the allocation, lock and wall hooks:
 * agent.h): a few rescans after each dlopen or dlclose, and a periodic one. */
uint64_t host_agent_hooks_run(void *arg, uint64_t now)
{
	(void)arg;
	return agent_hooks_service(now);
}

bool host_agent_hooks_wanted(void *arg)
{
	(void)arg;
	return agent_hooks_rescan_wanted();
}
