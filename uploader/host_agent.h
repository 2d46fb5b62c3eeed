/*
 * host_agent.h - the agent's services as the background host runs them: unwind tables
 * of new modules, memory for the profiles and the live heap, new threads' timers, the
 * GOT hooks of new modules. Each is a struct bg_service callback (common/bg_host.h);
 * host_agent_room_* take the profile pair as their argument, the others none.
 * Context: the host thread (the uploader's).
 */
#ifndef DDPROF_UPLOADER_HOST_AGENT_H
#define DDPROF_UPLOADER_HOST_AGENT_H

#include <stdbool.h>
#include <stdint.h>

uint64_t host_agent_modules_run(void *arg, uint64_t now);
uint64_t host_agent_room_run(void *arg, uint64_t now);
bool host_agent_room_wanted(void *arg);
uint64_t host_agent_threads_run(void *arg, uint64_t now);
bool host_agent_threads_wanted(void *arg);
bool host_agent_threads_before_sleep(void *arg, uint64_t wake);
void host_agent_threads_after_sleep(void *arg);
uint64_t host_agent_hooks_run(void *arg, uint64_t now);
bool host_agent_hooks_wanted(void *arg);

#endif
