#include "jail.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int failed(struct jail_error *e, const char *step, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int failed(struct jail_error *e, const char *step, int err, const char *fmt, ...)
{
	va_list ap;

	e->step = step;
	e->err = err;
	va_start(ap, fmt);
	(void)vsnprintf(e->what, sizeof(e->what), fmt, ap);
	va_end(ap);
	return -1;
}

int jail_identify(const char *path, struct jail_ident *id, struct jail_error *e)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return failed(e, "check-jail", errno, "%s", path);
	if (!S_ISDIR(st.st_mode))
		return failed(e, "check-jail", ENOTDIR, "%s", path);
	id->dev = st.st_dev;
	id->ino = st.st_ino;
	return 0;
}

int jail_is_root(const struct jail_ident *id)
{
	struct stat st;

	return stat("/", &st) == 0 && st.st_dev == id->dev && st.st_ino == id->ino;
}

int jail_pivot(const char *jail, const char *old_root, struct jail_error *e)
{
	char parked[PATH_MAX];
	struct stat st;
	int n;

	/* Slave, not private: mounts of the node still reach this namespace, and nothing done here goes back. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return failed(e, "make-rslave", errno, "/");
	/* pivot_root needs the new root to be a mount point; the jail may be a plain directory. */
	if (mount(jail, jail, NULL, MS_BIND | MS_REC, NULL) < 0)
		return failed(e, "bind-jail", errno, "%s", jail);
	n = snprintf(parked, sizeof(parked), "%s/%s", jail, old_root);
	if (n < 0 || (size_t)n >= sizeof(parked))
		return failed(e, "old-root", ENAMETOOLONG, "%s/%s", jail, old_root);
	if (mkdir(parked, 0700) < 0 && errno != EEXIST)
		return failed(e, "old-root", errno, "%s", parked);
	/* Not followed: a symlink planted there by a user of the jail must not choose where the node's root goes. */
	if (lstat(parked, &st) < 0)
		return failed(e, "old-root", errno, "%s", parked);
	if (!S_ISDIR(st.st_mode))
		return failed(e, "old-root", ENOTDIR, "%s", parked);
	if (chdir(jail) < 0)
		return failed(e, "pivot-root", errno, "%s", jail);
	if (syscall(SYS_pivot_root, ".", old_root) < 0)
		return failed(e, "pivot-root", errno, "%s", jail);
	if (chdir("/") < 0) {
		jail_undo(old_root);
		return failed(e, "pivot-root", errno, "chdir to the new root");
	}
	return 0;
}

int jail_detach(const char *old_root, struct jail_error *e)
{
	char parked[PATH_MAX];
	int n = snprintf(parked, sizeof(parked), "/%s", old_root);

	if (n < 0 || (size_t)n >= sizeof(parked))
		return failed(e, "detach-old-root", ENAMETOOLONG, "/%s", old_root);
	if (umount2(parked, MNT_DETACH) < 0)
		return failed(e, "detach-old-root", errno, "%s", parked);
	return 0;
}

void jail_undo(const char *old_root)
{
	char parked[PATH_MAX];
	int n = snprintf(parked, sizeof(parked), "/%s", old_root);

	/* Best effort: a failure has been reported already, and slurmstepd then only talks to slurmd and exits. */
	if (n > 0 && (size_t)n < sizeof(parked) && chdir(parked) == 0 && chroot(".") == 0 && chdir("/") == 0)
		return;
}

/* One of the two variables: unset is "", else an absolute path other than "/", trailing slashes dropped. */
static int env_dir(const char *name, char *dst, struct jail_error *e)
{
	const char *value = getenv(name);
	size_t len;

	dst[0] = '\0';
	if (value == NULL || value[0] == '\0')
		return 0;
	len = strlen(value);
	if (value[0] != '/')
		return failed(e, "job-dirs", EINVAL, "%s=%.64s is not an absolute path", name, value);
	if (len >= PATH_MAX)
		return failed(e, "job-dirs", ENAMETOOLONG, "%s", name);
	while (len > 1 && value[len - 1] == '/')
		len--;
	if (len == 1)
		return failed(e, "job-dirs", EINVAL, "%s=%.64s is the node's root", name, value);
	memcpy(dst, value, len);
	dst[len] = '\0';
	return 0;
}

/* The smallest size: a tmpfs rounds its size up to whole pages, and one of 0 would have no limit at all. */
#define JOB_DIR_MIN_SIZE 4096ULL

/* A size variable: unset is 0 (no tmpfs); else only digits, at least JOB_DIR_MIN_SIZE, and its directory set. */
static int env_size(const char *name, const char *dir, unsigned long long *dst, struct jail_error *e)
{
	const char *value = getenv(name);
	char *end = NULL;

	*dst = 0;
	if (value == NULL || value[0] == '\0')
		return 0;
	if (dir[0] == '\0')
		return failed(e, "job-dirs", EINVAL, "%s without its directory", name);
	errno = 0;
	if (value[0] < '0' || value[0] > '9')
		return failed(e, "job-dirs", EINVAL, "%s=%.32s is not a number of bytes", name, value);
	*dst = strtoull(value, &end, 10);
	if (errno != 0 || end == NULL || *end != '\0')
		return failed(e, "job-dirs", errno ? errno : EINVAL, "%s=%.32s is not a number of bytes", name, value);
	if (*dst < JOB_DIR_MIN_SIZE)
		return failed(e, "job-dirs", EINVAL, "%s=%.32s is below %llu bytes", name, value, JOB_DIR_MIN_SIZE);
	return 0;
}

int jail_job_dirs_from_env(struct jail_job_dirs *dirs, struct jail_error *e)
{
	if (env_dir("SLURMCTL_JOB_TMP", dirs->tmp, e) < 0 || env_dir("SLURMCTL_JOB_SHM", dirs->shm, e) < 0)
		return -1;
	/* One without the other would isolate half of what a job keeps to itself. */
	if ((dirs->tmp[0] == '\0') != (dirs->shm[0] == '\0'))
		return failed(e, "job-dirs", EINVAL, "SLURMCTL_JOB_TMP and SLURMCTL_JOB_SHM go together");
	if (env_size("SLURMCTL_JOB_TMP_SIZE", dirs->tmp, &dirs->tmp_size, e) < 0 ||
	    env_size("SLURMCTL_JOB_SHM_SIZE", dirs->shm, &dirs->shm_size, e) < 0)
		return -1;
	return 0;
}

/*
 * mkdir that tolerates an existing directory, then insists on root's directory with exactly `mode`. Messages name the
 * path as the node knows it: `path` without its first `shown` bytes (the parked old root).
 */
static int own_dir(const char *path, size_t shown, mode_t mode, struct jail_error *e)
{
	const char *name = path + shown;
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return failed(e, "job-dirs", errno, "mkdir %s", name);
	/* Not followed: whatever is there must be the directory itself. */
	if (lstat(path, &st) < 0)
		return failed(e, "job-dirs", errno, "%s", name);
	if (!S_ISDIR(st.st_mode))
		return failed(e, "job-dirs", ENOTDIR, "%s", name);
	if (st.st_uid != 0)
		return failed(e, "job-dirs", EPERM, "%s is not root's", name);
	if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0)
		return failed(e, "job-dirs", errno, "chmod %s", name);
	return 0;
}

/* Missing parents of `path` (after its first `shown` bytes), 0755: outside the jail, where no user reaches. */
static int make_parents(char *path, size_t shown, struct jail_error *e)
{
	char *slash;

	for (slash = strchr(path + shown + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			int err = errno;

			*slash = '/';
			return failed(e, "job-dirs", err, "mkdir parents of %s", path + shown);
		}
		*slash = '/';
	}
	return 0;
}

/* `<prefix><base>/<job id>`, made if missing; the path goes to `dir` (PATH_MAX bytes). */
static int job_dir(const char *prefix, const char *base, uint32_t job_id, char *dir, struct jail_error *e)
{
	char b[PATH_MAX];
	size_t shown = strlen(prefix);
	int n = snprintf(b, sizeof(b), "%s%s", prefix, base);

	if (n < 0 || (size_t)n >= sizeof(b))
		return failed(e, "job-dirs", ENAMETOOLONG, "%s", base);
	n = snprintf(dir, PATH_MAX, "%s/%" PRIu32, b, job_id);
	if (n < 0 || n >= PATH_MAX)
		return failed(e, "job-dirs", ENAMETOOLONG, "%s/%" PRIu32, base, job_id);
	if (make_parents(b, shown, e) < 0 || own_dir(b, shown, 0700, e) < 0 || own_dir(dir, shown, 01777, e) < 0)
		return -1;
	return 0;
}

/*
 * The job's tmpfs on `dir` (`<base>/<job id>`, made by job_dir), unless there is one: `dir` on another device than
 * `base` is a mount point already, made by another process of the job. The lock on the base makes check and mount
 * one step for the job's processes that come at once (two steps, a step and sbcast's writer).
 */
static int mount_job_tmpfs(const char *base, const char *dir, unsigned long long size, struct jail_error *e)
{
	struct stat b, d;
	char opts[64];
	int fd, rc = 0;

	fd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return failed(e, "job-dirs", errno, "%s", base);
	if (flock(fd, LOCK_EX) < 0) {
		rc = failed(e, "job-dirs", errno, "lock %s", base);
		goto out;
	}
	if (fstat(fd, &b) < 0 || lstat(dir, &d) < 0) {
		rc = failed(e, "job-dirs", errno, "%s", dir);
		goto out;
	}
	if (d.st_dev != b.st_dev)
		goto out;
	(void)snprintf(opts, sizeof(opts), "size=%llu,mode=1777", size);
	if (mount("slurmctl-job", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		rc = failed(e, "job-dirs", errno, "mount a tmpfs of %llu bytes on %s", size, dir);
out:
	(void)close(fd); /* and the lock with it */
	return rc;
}

int jail_job_dirs_mount(const struct jail_job_dirs *dirs, uint32_t job_id, struct jail_error *e)
{
	const char *bases[2] = {dirs->tmp, dirs->shm};
	const unsigned long long sizes[2] = {dirs->tmp_size, dirs->shm_size};
	char dir[PATH_MAX];

	for (int i = 0; i < 2; i++) {
		if (bases[i][0] == '\0' || sizes[i] == 0)
			continue;
		if (job_dir("", bases[i], job_id, dir, e) < 0 || mount_job_tmpfs(bases[i], dir, sizes[i], e) < 0)
			return -1;
	}
	return 0;
}

/* Bind `source` onto the directory `target` of this namespace, then make that mount nosuid and nodev. */
static int bind_private(const char *source, const char *target, struct jail_error *e)
{
	struct stat st;

	if (lstat(target, &st) < 0)
		return failed(e, "job-dirs", errno, "%s", target);
	if (!S_ISDIR(st.st_mode))
		return failed(e, "job-dirs", ENOTDIR, "%s", target);
	if (mount(source, target, NULL, MS_BIND, NULL) < 0)
		return failed(e, "job-dirs", errno, "bind %s onto %s", source, target);
	if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
		return failed(e, "job-dirs", errno, "remount %s nosuid,nodev", target);
	return 0;
}

int jail_job_dirs_bind(const char *old_root, const struct jail_job_dirs *dirs, uint32_t job_id, struct jail_error *e)
{
	char prefix[NAME_MAX + 2], tmp[PATH_MAX], shm[PATH_MAX];

	if (dirs->tmp[0] == '\0')
		return 0;
	(void)snprintf(prefix, sizeof(prefix), "/%s", old_root);
	if (job_dir(prefix, dirs->tmp, job_id, tmp, e) < 0 || job_dir(prefix, dirs->shm, job_id, shm, e) < 0)
		return -1;
	if (bind_private(tmp, "/tmp", e) < 0 || bind_private(shm, "/dev/shm", e) < 0)
		return -1;
	return 0;
}

/* Deep enough for any real job's scratch; deeper trees are left (and reported) rather than risk slurmstepd's stack. */
#define REMOVE_MAX_DEPTH 256

/*
 * Removes `name` in the directory `parent`: a directory with all it holds, anything else (a symlink too) itself. Each
 * level is opened relative to the one above, never through a path, so a link swapped in cannot lead elsewhere. The
 * recursion is bounded by REMOVE_MAX_DEPTH (one small frame and one descriptor a level).
 */
static int remove_at(int parent, const char *name, int depth) /* NOLINT(misc-no-recursion) */
{
	int fd, rc = 0;
	struct dirent *d;
	DIR *dir;

	if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	if (depth >= REMOVE_MAX_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	dir = fdopendir(fd);
	if (dir == NULL) {
		(void)close(fd);
		return -1;
	}
	/* On, past a failure: as much as can go goes; the first failure's errno is the one reported. */
	while ((d = readdir(dir)) != NULL) {
		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		if (remove_at(fd, d->d_name, depth + 1) < 0 && rc == 0)
			rc = errno;
	}
	(void)closedir(dir);
	if (rc == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = errno;
	errno = rc;
	return rc == 0 ? 0 : -1;
}

/*
 * The job's tmpfs on `<base>/<name>`, if any (jail_job_dirs_mount): detached, so a step that still holds it keeps it
 * until it ends, and the directory under it can go. Not a mount point (a plain job directory) or gone is success.
 */
static int unmount_job_tmpfs(const char *base, const char *name, struct jail_error *e)
{
	char dir[PATH_MAX];
	int n = snprintf(dir, sizeof(dir), "%s/%s", base, name);

	if (n < 0 || (size_t)n >= sizeof(dir))
		return failed(e, "job-dirs", ENAMETOOLONG, "%s/%s", base, name);
	if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
		return failed(e, "job-dirs", errno, "unmount %s", dir);
	return 0;
}

static int remove_job_dir(const char *base, uint32_t job_id, struct jail_error *e)
{
	char name[16];
	int parent;

	parent = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (parent < 0)
		return errno == ENOENT ? 0 : failed(e, "job-dirs", errno, "%s", base);
	(void)snprintf(name, sizeof(name), "%" PRIu32, job_id);
	if (unmount_job_tmpfs(base, name, e) < 0) {
		(void)close(parent);
		return -1;
	}
	if (remove_at(parent, name, 0) < 0) {
		int err = errno;

		(void)close(parent);
		return failed(e, "job-dirs", err, "remove %s/%s", base, name);
	}
	(void)close(parent);
	return 0;
}

int jail_job_dirs_remove(const struct jail_job_dirs *dirs, uint32_t job_id, struct jail_error *e)
{
	if (dirs->tmp[0] == '\0')
		return 0;
	if (remove_job_dir(dirs->tmp, job_id, e) < 0 || remove_job_dir(dirs->shm, job_id, e) < 0)
		return -1;
	return 0;
}
