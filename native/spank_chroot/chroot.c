/*
 * chroot.so: every batch, interactive and normal job step runs with the shared jail as "/", slurmstepd included.
 *
 * plugstack.conf:  required /usr/lib/slurmctl/chroot.so jail=<path> [old_root=<name>]
 *
 * Where it happens: slurm_spank_init, in slurmstepd itself (remote context), before the step's I/O is set up. The
 * step daemon's main thread gets a mount namespace of its own and pivots into the jail, so everything it does for the
 * step from then on sees the jail as "/": the stdout/stderr/stdin files (`sbatch -o /var/tmp/x.out`, directories a
 * user created), the working directory (`--chdir`), TaskProlog/TaskEpilog and the tasks it forks. The jail must hold
 * what slurmstepd itself uses at the same paths (SlurmdSpoolDir, the munge socket, /dev, /sys, /proc, the Slurm
 * configs and plugins): the worker's complement-jail binds them in before slurmd starts. slurmstepd's other threads
 * (its message thread, started earlier) stay where they were; they serve Slurm's own RPCs and open no user path.
 * What Slurm does for a job outside any step (sbcast's writer in slurmd) enters the jail through job_container/jail
 * (job_container_jail.c), which finds the jail on this plugin's line.
 *
 * Fail closed: any failure fails the step before its I/O or tasks start (the plugin is `required`), and the task
 * hook ends every task whose root is not the jail, whatever plugstack.conf says, so the user's program never runs
 * on the node's root. The extern step (and any other special step) is left alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
#include <slurm/spank.h>

#include "args.h"
#include "confine.h"
#include "jail.h"

/*
 * Built and tested against Slurm 24.11 and 26.05 only: where slurm_spank_init runs in slurmstepd (after its message
 * thread starts, before the step's I/O, working directory and tasks: job_manager() in src/slurmd/slurmstepd/mgr.c,
 * the same order in both) is internal to Slurm and must be re-checked for every new Slurm release.
 */
#if !((SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0) && SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(24, 12, 0)) || \
      (SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0) && SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(26, 6, 0)))
#error "chroot.so is built for Slurm 24.11 and 26.05; re-check the hooks it relies on for another release"
#endif

SPANK_PLUGIN(chroot, 1);

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
/*
 * 26.05 (since 25.11) returns a required plugin's own slurm_spank_init code to slurmd unless the plugin names one: a
 * jail that cannot be entered is the node's fault, as 24.11 treated every failed init (the node drains and a batch
 * job is requeued), and srun then says "Spank plugin failure, node failed" instead of "Unspecified error".
 */
int slurm_spank_init_failure_mode = ESPANK_NODE_FAILURE;
#endif

#ifndef SLURM_INTERACTIVE_STEP
#define SLURM_INTERACTIVE_STEP (0xfffffffa)
#endif

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

/*
 * What slurm_spank_init did, for the task hook: the tasks are forks of the thread that ran it, so they inherit these.
 * `jailed` is set only once slurmstepd's root is the jail.
 */
static struct {
	int jailed;
	struct jail_ident jail;
	struct confine_opts confine; /* what each task is confined to (confine.h) */
} stepd;

/*
 * For job_container/jail, loaded in the same slurmstepd: the jail's identity once this process's main thread is
 * inside it, else NULL. A child of slurmstepd whose root is this is in the jail already.
 */
__attribute__((visibility("default"))) const struct jail_ident *slurmctl_chroot_jail(void);

const struct jail_ident *slurmctl_chroot_jail(void)
{
	return stepd.jailed ? &stepd.jail : NULL;
}

static int enters_jail(uint32_t step_id)
{
	return step_id <= SLURM_MAX_NORMAL_STEP_ID || step_id == SLURM_BATCH_SCRIPT ||
	       step_id == SLURM_INTERACTIVE_STEP;
}

/* Every failure goes through here so the message always names the jail, the step and strerror(errno). */
static int report(uint32_t job_id, const char *jail, const struct jail_error *e)
{
	slurm_error("chroot: job %u: cannot enter jail %s: step '%s' failed: %s: %s", job_id, jail, e->step, e->what,
		    strerror(e->err));
	return -1;
}

/* A fresh /proc of this PID namespace where the jail has none (a jail completed by complement-jail has one). */
static int ensure_proc(struct jail_error *e)
{
	struct statfs fs;

	if (statfs("/proc", &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC)
		return 0;
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		e->step = "mount-proc";
		e->err = errno;
		(void)snprintf(e->what, sizeof(e->what), "/proc");
		return -1;
	}
	return 0;
}

/* What the new root must offer slurmstepd before the node's root is let go. */
static int check_root(struct jail_error *e)
{
	if (access("/bin/sh", X_OK) < 0) {
		e->step = "check-shell";
		e->err = errno;
		(void)snprintf(e->what, sizeof(e->what), "/bin/sh in the jail");
		return -1;
	}
	if (ensure_proc(e) < 0)
		return -1;
	if (!jail_is_root(&stepd.jail)) {
		e->step = "check-root";
		e->err = EXDEV;
		(void)snprintf(e->what, sizeof(e->what), "\"/\" is not the jail after pivot_root");
		return -1;
	}
	return 0;
}

/*
 * The pivot proper, with the job's private /tmp and /dev/shm when the pod provides them (jail.h); an unusable jail
 * puts slurmstepd back on the node's root, where it can report the failure.
 */
static int enter_root(const struct chroot_args *a, const struct jail_job_dirs *dirs, uint32_t job_id,
		      struct jail_error *e)
{
	if (jail_pivot(a->jail, a->old_root, e) < 0)
		return -1;
	if (check_root(e) < 0 || jail_job_dirs_bind(a->old_root, dirs, job_id, e) < 0 ||
	    jail_detach(a->old_root, e) < 0) {
		jail_undo(a->old_root);
		return -1;
	}
	return 0;
}

/* slurmstepd's main thread into the jail (see the top of this file). */
static int enter_jail(const struct chroot_args *a, uint32_t job_id, struct jail_error *e)
{
	struct jail_job_dirs dirs;

	if (jail_identify(a->jail, &stepd.jail, e) < 0 || jail_job_dirs_from_env(&dirs, e) < 0)
		return -1;
	/* The job's sized /tmp and /dev/shm, on the node's side, where all of the job's steps find them. */
	if (jail_job_dirs_mount(&dirs, job_id, e) < 0)
		return -1;
	/* This thread only: slurmstepd already runs other threads, and CLONE_NEWNS unshares this one's root and cwd. */
	if (unshare(CLONE_NEWNS) < 0) {
		e->step = "unshare";
		e->err = errno;
		(void)snprintf(e->what, sizeof(e->what), "new mount namespace");
		return -1;
	}
	return enter_root(a, &dirs, job_id, e);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	struct chroot_args args;
	struct jail_error e;
	uint32_t job_id = 0, step_id = 0;
	char err[256];

	if (spank_context() != S_CTX_REMOTE)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS) {
		slurm_error("chroot: step 'step-id' failed: cannot tell which job step this is; not running the step");
		return -1;
	}
	if (!enters_jail(step_id))
		return 0;
	if (chroot_args_parse(ac, av, &args, err, sizeof(err)) < 0) {
		slurm_error("chroot: job %u: step 'parse-args' failed: plugstack.conf: %s", job_id, err);
		return -1;
	}
	memset(&e, 0, sizeof(e));
	if (jail_confine_opts_from_env(&stepd.confine, &e) < 0 || enter_jail(&args, job_id, &e) < 0)
		return report(job_id, args.jail, &e);
	stepd.jailed = 1;
	slurm_debug("chroot: job %u step %u: slurmstepd entered jail %s", job_id, step_id, args.jail);
	return 0;
}

/*
 * Returning an error stops the task only when plugstack.conf marks the plugin "required"; with "optional" slurmstepd
 * would run the user's program anyway. This callback runs in the forked task process, so ending that process here
 * keeps the plugin closed whatever the keyword says.
 */
static void __attribute__((noreturn)) end_task(void)
{
	_exit(1);
}

/*
 * The last word before the user's program: in each forked task, as root, after job_container/jail's join and before
 * the task drops privileges and executes. Its root must be the jail; then the task is confined (confine.h).
 */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	uint32_t job_id = 0, step_id = 0;
	struct jail_error e;

	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS) {
		slurm_error("chroot: step 'step-id' failed: cannot tell which job step this is; not running the task");
		end_task();
	}
	if (!enters_jail(step_id))
		return 0;
	if (!stepd.jailed) {
		slurm_error("chroot: job %u: step 'check-task' failed: slurmstepd did not enter the jail; not running the task",
			    job_id);
		end_task();
	}
	if (!jail_is_root(&stepd.jail)) {
		slurm_error("chroot: job %u: step 'check-task' failed: the task's root is not the jail; not running the task",
			    job_id);
		end_task();
	}
	memset(&e, 0, sizeof(e));
	if (jail_confine_task(&stepd.confine, &e) < 0) {
		slurm_error("chroot: job %u: step '%s' failed: %s: %s; not running the task", job_id, e.step, e.what,
			    strerror(e.err));
		end_task();
	}
	return 0;
}
