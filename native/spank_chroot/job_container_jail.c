/*
 * job_container/jail (job_container_jail.so in Slurm's PluginDir; slurm.conf JobContainerType=job_container/jail):
 * every process Slurm moves into a job's "container" enters the jail instead. Slurm calls the join in the processes
 * it forks on behalf of a job: in slurmd, the writer of `sbcast` files (which otherwise writes them into the worker
 * container, where no job can see them); in slurmstepd, each task, TaskProlog/TaskEpilog and the SPANK user
 * callbacks' children. The chroot SPANK plugin has normally moved slurmstepd into the jail already, and then a join
 * finds its root is the jail and does nothing; otherwise it pivots the process into the jail itself (in a mount
 * namespace of its own, as chroot.so does), so a step whose slurmstepd somehow stayed outside still runs nothing
 * there.
 *
 * The jail is the one on chroot.so's line of plugstack.conf (slurm.conf PlugStackConfig), read at each join, so the
 * two can never disagree. Fail closed: when it cannot be read or entered, the join fails and Slurm runs nothing
 * (the task exits, the sbcast file is not written).
 *
 * Built against Slurm's public headers, for Slurm 24.11 and 26.05, whose plugin interfaces differ:
 *  - 24.11: a job_container plugin, plugin_type "job_container/jail" in job_container_jail.so, the seven
 *    container_p_* functions of src/interfaces/job_container.c.
 *  - 26.05 (since 25.11): job_container became "namespace" (src/interfaces/namespace.c): plugin_type
 *    "namespace/jail" in namespace_jail.so (the Makefile names the file), the nine namespace_p_* functions;
 *    stepd_create/stepd_delete take slurmstepd's step record instead of the job id, join_external takes the step id
 *    and a list, and can_bpf/setup_bpf_token are new. slurm.conf's JobContainerType=job_container/jail still selects
 *    it (Slurm maps job_container/X to namespace/X, with a warning that NamespaceType replaces JobContainerType).
 * Re-checked for every release: the build refuses any other.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
#include <slurm/spank.h>

#include "args.h"
#include "jail.h"

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0) && SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(24, 12, 0)
#define JAIL_NAMESPACE_API 0
#elif SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0) && SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(26, 6, 0)
#define JAIL_NAMESPACE_API 1
#else
#error "job_container/jail is built for Slurm 24.11 and 26.05; re-check the plugin interface for another release"
#endif

#if JAIL_NAMESPACE_API
#include <pthread.h>

const char plugin_name[] = "namespace jail plugin (slurmctl)";
const char plugin_type[] = "namespace/jail";
#define JAIL_FN(name) namespace_p_##name

/*
 * The leading members of slurmstepd's step record (stepd_step_rec_t, src/slurmd/slurmstepd/slurmstepd_job.h; the
 * same in 24.11 and 26.05.0-26.05.3), which Slurm 26.05 hands to stepd_create/stepd_delete instead of the job id.
 * Only step_id is read, and only after checking that it names the extern step (the only step those two are called
 * for), so a record laid out differently fails the removal loudly instead of removing another job's directories.
 */
struct stepd_step_rec_head {
	/* Only there for step_id's offset. */
	// cppcheck-suppress unusedStructMember
	char *alias_list;
	// cppcheck-suppress unusedStructMember
	void *container;
	// cppcheck-suppress unusedStructMember
	int state; /* slurmstepd_state_t, an enum */
	pthread_cond_t state_cond;
	pthread_mutex_t state_mutex;
	slurm_step_id_t step_id;
};
#else
const char plugin_name[] = "job_container jail plugin (slurmctl)";
const char plugin_type[] = "job_container/jail";
#define JAIL_FN(name) container_p_##name
#endif
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

/* Slurm's parsed slurm.conf (libslurmfull exports it; its type is the public slurm_conf_t). */
extern slurm_conf_t slurm_conf;

#define PLUGSTACK_DEFAULT "/etc/slurm/plugstack.conf"

int init(void)
{
	return SLURM_SUCCESS;
}

int fini(void)
{
	return SLURM_SUCCESS;
}

/* Whether chroot.so, loaded in this process, moved it into the jail and "/" is still that jail (see chroot.c). */
static int jailed_by_chroot_so(const char *plugin)
{
	const struct jail_ident *(*jail)(void);
	const struct jail_ident *id;
	void *h = dlopen(plugin, RTLD_LAZY | RTLD_NOLOAD);
	int inside;

	if (h == NULL)
		return 0;
	*(void **)&jail = dlsym(h, "slurmctl_chroot_jail");
	id = jail ? jail() : NULL;
	inside = id != NULL && jail_is_root(id);
	(void)dlclose(h);
	return inside;
}

static int refuse(uint32_t job_id, const char *what, const char *detail)
{
	slurm_error("job_container/jail: job %u: %s: %s; not running it outside the jail", job_id, what, detail);
	return SLURM_ERROR;
}

/* The same words as chroot.so's, so one message names a broken jail whichever plugin met it. */
static int cannot_enter(uint32_t job_id, const char *jail, const struct jail_error *e)
{
	slurm_error("job_container/jail: job %u: cannot enter jail %s: step '%s' failed: %s: %s; not running it outside"
		    " the jail", job_id, jail, e->step, e->what, strerror(e->err));
	return SLURM_ERROR;
}

int JAIL_FN(join)(slurm_step_id_t *step_id, uid_t uid, bool step_create)
{
	const char *plugstack = slurm_conf.plugstack ? slurm_conf.plugstack : PLUGSTACK_DEFAULT;
	struct chroot_args args;
	struct jail_job_dirs dirs;
	char plugin[PATH_MAX];
	struct jail_ident jail;
	struct jail_error e;
	char err[256];

	(void)uid;
	/*
	 * slurmd joins before it executes slurmstepd (step_create): slurmstepd runs from the node's root and enters the
	 * jail itself (chroot.so). Job 0 is not a job. The extern step stays on the node, as chroot.so leaves it.
	 */
	if (step_create || step_id == NULL || step_id->job_id == 0 || step_id->step_id == SLURM_EXTERN_CONT)
		return SLURM_SUCCESS;
	if (chroot_args_from_plugstack(plugstack, &args, plugin, err, sizeof(err)) < 0)
		return refuse(step_id->job_id, "cannot tell the jail", err);
	/* A child of a slurmstepd that chroot.so moved into the jail: there already. */
	if (jailed_by_chroot_so(plugin))
		return SLURM_SUCCESS;
	memset(&e, 0, sizeof(e));
	if (jail_identify(args.jail, &jail, &e) < 0)
		return cannot_enter(step_id->job_id, args.jail, &e);
	if (jail_is_root(&jail))
		return SLURM_SUCCESS;
	/* The job's sized /tmp and /dev/shm first, on the node's side, where all of the job's processes find them. */
	if (jail_job_dirs_from_env(&dirs, &e) < 0 || jail_job_dirs_mount(&dirs, step_id->job_id, &e) < 0)
		return cannot_enter(step_id->job_id, args.jail, &e);
	/* A forked child of slurmd or slurmstepd: single-threaded, so the namespace is the whole process's. */
	if (unshare(CLONE_NEWNS) < 0) {
		e.step = "unshare";
		e.err = errno;
		(void)snprintf(e.what, sizeof(e.what), "new mount namespace");
		return cannot_enter(step_id->job_id, args.jail, &e);
	}
	if (jail_pivot(args.jail, args.old_root, &e) < 0)
		return cannot_enter(step_id->job_id, args.jail, &e);
	if (jail_job_dirs_bind(args.old_root, &dirs, step_id->job_id, &e) < 0 || jail_detach(args.old_root, &e) < 0) {
		jail_undo(args.old_root);
		return cannot_enter(step_id->job_id, args.jail, &e);
	}
	return SLURM_SUCCESS;
}

#if JAIL_NAMESPACE_API
/* 26.05: the list is Slurm's list_t of namespace file descriptors to fill; none is handed out. */
int namespace_p_join_external(slurm_step_id_t *step_id, void *ns_map)
{
	(void)step_id;
	(void)ns_map;
	return -1; /* no namespace file to hand out: pam_slurm_adopt and the like get none */
}
#else
int container_p_join_external(uint32_t job_id)
{
	(void)job_id;
	return -1; /* no namespace file to hand out: pam_slurm_adopt and the like get none */
}
#endif

/* Slurm's signature (src/interfaces/job_container.c, namespace.c), hence the non-const pointer. */
int JAIL_FN(restore)(char *dir_name, bool recover) /* NOLINT(readability-non-const-parameter) */
{
	(void)dir_name;
	(void)recover;
	return SLURM_SUCCESS;
}

#if JAIL_NAMESPACE_API
int namespace_p_stepd_create(void *step)
{
	(void)step;
	return SLURM_SUCCESS;
}
#else
int container_p_stepd_create(uint32_t job_id, void *step)
{
	(void)job_id;
	(void)step;
	return SLURM_SUCCESS;
}
#endif

/* Tries of the removal, and how long each waits at most for root to come back (see below). */
#define REMOVE_TRIES 3
#define ROOT_WAIT_STEPS 200
#define ROOT_WAIT_STEP_US 10000

/*
 * Slurm 24.11's slurmstepd (and 26.05's, which has the same handler) shuts X11 forwarding down in a worker thread as the step ends (mgr.c, `fail1:`
 * _x11_signal_handler), with or without X11: it sets the whole process's effective uid to the job's user and back, a
 * few milliseconds while this runs in the main thread. Removal meeting that window fails with EACCES (seen in CI:
 * slurmstepd's own "Unable to move pid ... to root cgroup" at the same instant). So: wait, bounded, for root.
 */
static void wait_for_root(void)
{
	for (int i = 0; i < ROOT_WAIT_STEPS && geteuid() != 0; i++)
		(void)usleep(ROOT_WAIT_STEP_US);
}

/*
 * The extern step's slurmstepd (on the node's root) calls this as it ends, after the job's other steps on this node:
 * the job's private /tmp and /dev/shm go with everything in them (their tmpfs unmounted first, when sized).
 */
static int remove_job_dirs(uint32_t job_id)
{
	struct jail_job_dirs dirs;
	struct jail_error e;

	memset(&e, 0, sizeof(e));
	if (jail_job_dirs_from_env(&dirs, &e) < 0)
		goto failed;
	for (int tries = 1;; tries++) {
		wait_for_root();
		if (jail_job_dirs_remove(&dirs, job_id, &e) == 0)
			return SLURM_SUCCESS;
		if (tries == REMOVE_TRIES || (e.err != EACCES && e.err != EPERM))
			goto failed;
		memset(&e, 0, sizeof(e));
	}
failed:
	slurm_error("job_container/jail: job %u: step '%s' failed: %s: %s", job_id, e.step, e.what, strerror(e.err));
	return SLURM_ERROR;
}

#if JAIL_NAMESPACE_API
int namespace_p_stepd_delete(const void *step)
{
	const struct stepd_step_rec_head *head = step;

	if (head == NULL || head->step_id.step_id != SLURM_EXTERN_CONT || head->step_id.job_id == 0) {
		slurm_error("job_container/jail: stepd_delete: the step record is not the extern step's as this plugin"
			    " reads it (Slurm's stepd_step_rec_t changed?); the job's /tmp and /dev/shm are left");
		return SLURM_ERROR;
	}
	return remove_job_dirs(head->step_id.job_id);
}
#else
int container_p_stepd_delete(uint32_t job_id)
{
	return remove_job_dirs(job_id);
}
#endif

int JAIL_FN(send_stepd)(int fd)
{
	(void)fd;
	return SLURM_SUCCESS;
}

int JAIL_FN(recv_stepd)(int fd)
{
	(void)fd;
	return SLURM_SUCCESS;
}

#if JAIL_NAMESPACE_API
/* Nothing here stands in the way of task/cgroup's BPF device filter (no user namespace), nor needs a BPF token. */
bool namespace_p_can_bpf(const void *step)
{
	(void)step;
	return true;
}

int namespace_p_setup_bpf_token(const void *step)
{
	(void)step;
	return SLURM_SUCCESS;
}
#endif
