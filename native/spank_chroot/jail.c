#include "jail.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
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
