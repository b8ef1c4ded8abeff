/*
 * chroot.so: the tasks of every batch, interactive and normal job step run with the shared jail as "/".
 *
 * plugstack.conf:  required /usr/lib/slurmctl/chroot.so jail=<path> [old_root=<name>]
 *
 * Where it happens: slurm_spank_task_init_privileged. slurmstepd calls it in each forked task process, as root, after
 * the step's privileged setup (stdio files, credentials, proctrack/container join) and before the task drops
 * privileges and executes the user's program. Entering the jail there moves only the user's task: slurmstepd itself
 * stays on the node's root, so the munge socket, SlurmdSpoolDir and the step's I/O keep working with a minimal jail.
 * Doing it earlier, in a callback that runs in slurmstepd itself (slurm_spank_init_post_opt), would pivot the step
 * daemon too, and it would then need all of those paths inside the jail (seen on Slurm 22.05: the node went down with
 * munge errors after the first job). Any failure ends the task process before exec (see end_task), so the user's
 * program never runs in the host's root: the plugin fails closed.
 *
 * The extern step (and any other special step) is left alone: it must stay in the host's namespaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
#include <slurm/spank.h>

#include "args.h"

/*
 * Built and tested against Slurm 24.11 only: install_script relies on how slurmstepd holds a batch step's argument
 * vector (see there), which is internal to slurmstepd and must be re-checked for every new Slurm release.
 */
#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(24, 11, 0) || SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 12, 0)
#error "chroot.so is built for Slurm 24.11; re-check install_script before building it for another release"
#endif

SPANK_PLUGIN(chroot, 1);

#ifndef SLURM_INTERACTIVE_STEP
#define SLURM_INTERACTIVE_STEP (0xfffffffa)
#endif

#define SCRIPT_NAME "slurm_script"

/* The batch script's path inside the jail; job->argv[0] points here in the task process only (see install_script). */
static char jailed_script[PATH_MAX];

struct task {
	const struct chroot_args *args;
	uint32_t job_id;
	uint32_t step_id;
	uid_t uid;
	gid_t gid;
	char **argv;
};

/* Every failure goes through here so the message always names the jail, the step and strerror(errno). */
static int failed(const struct task *t, const char *step, const char *what, int err)
{
	slurm_error("chroot: job %u: cannot enter jail %s: step '%s' failed: %s: %s", t->job_id, t->args->jail, step,
		    what, strerror(err));
	return -1;
}

static int enters_jail(uint32_t step_id)
{
	return step_id <= SLURM_MAX_NORMAL_STEP_ID || step_id == SLURM_BATCH_SCRIPT ||
	       step_id == SLURM_INTERACTIVE_STEP;
}

static int copy_fd(int from, int to)
{
	char buf[65536];
	ssize_t n;

	while ((n = read(from, buf, sizeof(buf))) != 0) {
		ssize_t off = 0;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		while (off < n) {
			ssize_t w = write(to, buf + off, (size_t)(n - off));

			if (w < 0) {
				if (errno == EINTR)
					continue;
				return -1;
			}
			off += w;
		}
	}
	return 0;
}

/*
 * slurmstepd executes the batch script from SlurmdSpoolDir, a host path the jail does not have. Copy it onto a tmpfs
 * that exists only in this task's mount namespace (on the emptied old-root directory) and point this process's
 * argv[0] there. The argv array is slurmstepd's, but this is the forked task process about to exec, so the change
 * is seen by nobody else.
 *
 * Slurm 24.11: S_JOB_ARGV hands out the step's argv, while the task executes task->argv (execve(task->argv[0], ...)
 * in slurmstepd's exec_task). For a batch step the two are one array (slurmstepd_job.c: task[0]->argv = step->argv),
 * so the rewrite reaches the exec. spank_prepend_task_argv (since 23.11) cannot do this job: it only puts words in
 * front of the script's host path, it cannot replace it. If another plugin prepends words to the batch task in the
 * same callback before this one, task->argv becomes a new array and the exec fails on the host path (closed, not
 * open: the script does not exist in the jail); the batch tests catch a Slurm release that changes the aliasing.
 */
static int install_script(const struct task *t, int script_fd)
{
	char where[PATH_MAX], opts[64];
	struct stat st;
	int out, n;

	if (fstat(script_fd, &st) < 0)
		return failed(t, "batch-script", "fstat of the batch script", errno);
	n = snprintf(where, sizeof(where), "/%s", t->args->old_root);
	if (n < 0 || (size_t)n >= sizeof(where))
		return failed(t, "batch-script", where, ENAMETOOLONG);
	(void)snprintf(opts, sizeof(opts), "mode=0755,nr_inodes=8,size=%lld", (long long)st.st_size + 4096);
	if (mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return failed(t, "batch-script", "mount tmpfs for the batch script", errno);
	n = snprintf(jailed_script, sizeof(jailed_script), "%s/%s", where, SCRIPT_NAME);
	if (n < 0 || (size_t)n >= sizeof(jailed_script))
		return failed(t, "batch-script", where, ENAMETOOLONG);
	out = open(jailed_script, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0500);
	if (out < 0)
		return failed(t, "batch-script", jailed_script, errno);
	if (copy_fd(script_fd, out) < 0 || fchown(out, t->uid, t->gid) < 0) {
		int err = errno;

		(void)close(out);
		return failed(t, "batch-script", jailed_script, err);
	}
	if (close(out) < 0)
		return failed(t, "batch-script", jailed_script, errno);
	t->argv[0] = jailed_script;
	return 0;
}

/* The mount-namespace work proper; the caller owns script_fd. */
static int pivot_into_jail(const struct task *t, const char *workdir, int script_fd)
{
	const struct chroot_args *a = t->args;
	char old_root[PATH_MAX];
	struct stat st;
	int n;

	if (unshare(CLONE_NEWNS) < 0)
		return failed(t, "unshare", "new mount namespace", errno);
	/* Slave, not private: host mounts still reach the task, and nothing done here propagates back. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return failed(t, "make-rslave", "/", errno);
	/* pivot_root needs the new root to be a mount point; the jail may be a plain directory. */
	if (mount(a->jail, a->jail, NULL, MS_BIND | MS_REC, NULL) < 0)
		return failed(t, "bind-jail", a->jail, errno);
	n = snprintf(old_root, sizeof(old_root), "%s/%s", a->jail, a->old_root);
	if (n < 0 || (size_t)n >= sizeof(old_root))
		return failed(t, "old-root", a->old_root, ENAMETOOLONG);
	if (mkdir(old_root, 0700) < 0 && errno != EEXIST)
		return failed(t, "old-root", old_root, errno);
	if (lstat(old_root, &st) < 0)
		return failed(t, "old-root", old_root, errno);
	if (!S_ISDIR(st.st_mode))
		return failed(t, "old-root", old_root, ENOTDIR);
	if (chdir(a->jail) < 0)
		return failed(t, "pivot-root", a->jail, errno);
	if (syscall(SYS_pivot_root, ".", a->old_root) < 0)
		return failed(t, "pivot-root", a->jail, errno);
	if (chdir("/") < 0)
		return failed(t, "pivot-root", "chdir to the new root", errno);
	n = snprintf(old_root, sizeof(old_root), "/%s", a->old_root);
	if (n < 0 || (size_t)n >= sizeof(old_root))
		return failed(t, "detach-old-root", a->old_root, ENAMETOOLONG);
	if (umount2(old_root, MNT_DETACH) < 0)
		return failed(t, "detach-old-root", old_root, errno);
	if (access("/bin/sh", X_OK) < 0)
		return failed(t, "check-shell", "/bin/sh in the jail", errno);
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return failed(t, "mount-proc", "/proc", errno);
	if (script_fd >= 0 && install_script(t, script_fd) < 0)
		return -1;
	if (chdir(workdir) < 0) {
		char what[PATH_MAX + 32];

		(void)snprintf(what, sizeof(what), "job working directory %s", workdir);
		return failed(t, "chdir-workdir", what, errno);
	}
	return 0;
}

static int enter_jail(const struct task *t)
{
	char workdir[PATH_MAX];
	struct stat st;
	int script_fd = -1, rc;

	if (stat(t->args->jail, &st) < 0)
		return failed(t, "check-jail", t->args->jail, errno);
	if (!S_ISDIR(st.st_mode))
		return failed(t, "check-jail", t->args->jail, ENOTDIR);
	/*
	 * slurmstepd changed into the job's working directory before forking (to /tmp, with a message, when the host
	 * lacks it). The same path must exist in the jail; after this callback slurmstepd changes into the job's
	 * directory once more, as the user, now inside the jail.
	 */
	if (getcwd(workdir, sizeof(workdir)) == NULL)
		return failed(t, "getcwd", "the job's working directory", errno);
	if (t->step_id == SLURM_BATCH_SCRIPT) {
		if (t->argv == NULL || t->argv[0] == NULL)
			return failed(t, "batch-script", "no batch script in the step's arguments", EINVAL);
		script_fd = open(t->argv[0], O_RDONLY | O_CLOEXEC);
		if (script_fd < 0)
			return failed(t, "batch-script", t->argv[0], errno);
	}
	rc = pivot_into_jail(t, workdir, script_fd);
	if (script_fd >= 0)
		(void)close(script_fd);
	return rc;
}

/*
 * Returning an error stops the task only when plugstack.conf marks the plugin "required"; with "optional" slurmstepd
 * would log it and run the user's program anyway, on the host or half inside a new namespace. This callback runs in
 * the forked task process, so ending that process here keeps the plugin closed whatever the keyword says.
 */
static void __attribute__((noreturn)) end_task(void)
{
	_exit(1);
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	struct chroot_args args;
	struct task t;
	char err[256];
	int argc = 0;

	if (spank_context() != S_CTX_REMOTE)
		return 0;
	memset(&t, 0, sizeof(t));
	t.args = &args;
	if (spank_get_item(sp, S_JOB_ID, &t.job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &t.step_id) != ESPANK_SUCCESS) {
		slurm_error("chroot: step 'step-id' failed: cannot tell which job step this is; not running the task");
		end_task();
	}
	if (!enters_jail(t.step_id))
		return 0;
	if (chroot_args_parse(ac, av, &args, err, sizeof(err)) < 0) {
		slurm_error("chroot: job %u: step 'parse-args' failed: plugstack.conf: %s", t.job_id, err);
		end_task();
	}
	if (spank_get_item(sp, S_JOB_UID, &t.uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &t.gid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ARGV, &argc, &t.argv) != ESPANK_SUCCESS) {
		(void)failed(&t, "job-info", "spank_get_item", EINVAL);
		end_task();
	}
	if (enter_jail(&t) < 0)
		end_task();
	if (t.step_id == SLURM_BATCH_SCRIPT)
		slurm_debug("chroot: job %u batch step entered jail %s", t.job_id, args.jail);
	else if (t.step_id == SLURM_INTERACTIVE_STEP)
		slurm_debug("chroot: job %u interactive step entered jail %s", t.job_id, args.jail);
	else
		slurm_debug("chroot: job %u step %u entered jail %s", t.job_id, t.step_id, args.jail);
	return 0;
}
