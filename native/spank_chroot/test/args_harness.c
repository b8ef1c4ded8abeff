/*
 * Feeds chroot_args_parse() odd plugstack.conf arguments and checks each verdict. Built with AddressSanitizer and
 * UBSan (`make harness`): any out-of-bounds access, leak or undefined behaviour aborts with a report. Prints one line
 * per case and "ok <n> cases" at the end; exits 1 on the first wrong verdict.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "jail.h"

static int cases;

static void expect(const char *name, int argc, char *const argv[], int want_rc, const char *want_in_err)
{
	struct chroot_args out;
	char err[256];
	int rc;

	memset(err, 'x', sizeof(err));
	rc = chroot_args_parse(argc, argv, &out, err, sizeof(err));
	cases++;
	if (memchr(err, '\0', sizeof(err)) == NULL) {
		printf("FAIL %s: message not NUL-terminated\n", name);
		exit(1);
	}
	if (rc != want_rc || (want_in_err != NULL && strstr(err, want_in_err) == NULL)) {
		printf("FAIL %s: rc=%d (want %d), err='%s' (want '%s')\n", name, rc, want_rc, err,
		       want_in_err ? want_in_err : "");
		exit(1);
	}
	printf("ok %s: rc=%d %s\n", name, rc, err);
}

static void expect_parsed(const char *name, int argc, char *const argv[], const char *jail, const char *old_root)
{
	struct chroot_args out;
	char err[256];

	cases++;
	if (chroot_args_parse(argc, argv, &out, err, sizeof(err)) != 0 || strcmp(out.jail, jail) != 0 ||
	    strcmp(out.old_root, old_root) != 0) {
		printf("FAIL %s: got jail='%s' old_root='%s' err='%s'\n", name, out.jail, out.old_root, err);
		exit(1);
	}
	printf("ok %s: jail=%.60s old_root=%.60s\n", name, out.jail, out.old_root);
}

/* The per-job directories from the environment (jail.h): `tmp` and `shm` NULL mean unset. */
static void expect_job_dirs(const char *name, const char *tmp, const char *shm, int want_rc, const char *want)
{
	struct jail_job_dirs dirs;
	struct jail_error e;
	int rc;

	if (tmp != NULL)
		setenv("SLURMCTL_JOB_TMP", tmp, 1);
	else
		unsetenv("SLURMCTL_JOB_TMP");
	if (shm != NULL)
		setenv("SLURMCTL_JOB_SHM", shm, 1);
	else
		unsetenv("SLURMCTL_JOB_SHM");
	memset(&e, 0, sizeof(e));
	rc = jail_job_dirs_from_env(&dirs, &e);
	cases++;
	/* On success `want` is the tmp directory as parsed ("" for off); on failure a part of the message. */
	if (rc != want_rc || (rc == 0 && strcmp(dirs.tmp, want) != 0) || (rc != 0 && strstr(e.what, want) == NULL)) {
		printf("FAIL %s: rc=%d (want %d), tmp='%s' what='%s' (want '%s')\n", name, rc, want_rc,
		       rc == 0 ? dirs.tmp : "", rc == 0 ? "" : e.what, want);
		exit(1);
	}
	printf("ok %s: rc=%d %s\n", name, rc, rc == 0 ? dirs.tmp : e.what);
}

/* The sizes (SLURMCTL_JOB_TMP_SIZE, SLURMCTL_JOB_SHM_SIZE; NULL: unset) with both directories set. */
static void expect_job_sizes(const char *name, const char *tmp, const char *shm, int want_rc,
			     unsigned long long want_tmp, unsigned long long want_shm, const char *want)
{
	struct jail_job_dirs dirs;
	struct jail_error e;
	int rc;

	setenv("SLURMCTL_JOB_TMP", "/t", 1);
	setenv("SLURMCTL_JOB_SHM", "/s", 1);
	if (tmp != NULL)
		setenv("SLURMCTL_JOB_TMP_SIZE", tmp, 1);
	else
		unsetenv("SLURMCTL_JOB_TMP_SIZE");
	if (shm != NULL)
		setenv("SLURMCTL_JOB_SHM_SIZE", shm, 1);
	else
		unsetenv("SLURMCTL_JOB_SHM_SIZE");
	memset(&e, 0, sizeof(e));
	rc = jail_job_dirs_from_env(&dirs, &e);
	cases++;
	if (rc != want_rc || (rc == 0 && (dirs.tmp_size != want_tmp || dirs.shm_size != want_shm)) ||
	    (rc != 0 && strstr(e.what, want) == NULL)) {
		printf("FAIL %s: rc=%d (want %d), sizes %llu %llu (want %llu %llu) what='%s' (want '%s')\n", name, rc,
		       want_rc, rc == 0 ? dirs.tmp_size : 0, rc == 0 ? dirs.shm_size : 0, want_tmp, want_shm,
		       rc == 0 ? "" : e.what, want);
		exit(1);
	}
	printf("ok %s: rc=%d %s\n", name, rc, rc == 0 ? "" : e.what);
	unsetenv("SLURMCTL_JOB_TMP_SIZE");
	unsetenv("SLURMCTL_JOB_SHM_SIZE");
}

/* A heap string of `n` copies of `c` after `prefix`, so ASan sees its exact end. */
static char *repeat(const char *prefix, char c, size_t n)
{
	size_t plen = strlen(prefix);
	char *s = malloc(plen + n + 1);

	if (s == NULL) {
		perror("malloc");
		exit(1);
	}
	memcpy(s, prefix, plen);
	memset(s + plen, c, n);
	s[plen + n] = '\0';
	return s;
}

int main(void)
{
	struct chroot_args out;
	char tiny[1];
	char *long_jail = repeat("jail=/", 'a', 100000);
	char *fits_jail = repeat("jail=/", 'b', PATH_MAX - 2);
	char *too_long_jail = repeat("jail=/", 'c', PATH_MAX - 1);
	char *long_key = repeat("", 'k', 100000);
	char *long_key_eq = repeat("", 'k', 100000);
	char *long_old_root = repeat("old_root=", 'o', NAME_MAX + 1);
	char *fits_old_root = repeat("old_root=", 'o', NAME_MAX);
	char *empty[] = { NULL };

	expect("no arguments", 0, empty, -1, "jail=<path> is required");
	expect("null vector", 1, NULL, -1, "malformed");
	expect("negative count", -1, empty, -1, "malformed");
	expect("null entry", 1, (char *[]){ NULL }, -1, "argument 1 is missing");
	expect("empty string", 1, (char *[]){ "" }, -1, "is not key=value");
	expect("bare equals", 1, (char *[]){ "=" }, -1, "unknown argument ''");
	expect("equals then value", 1, (char *[]){ "=/jail" }, -1, "unknown argument");
	expect("jail without equals", 1, (char *[]){ "jail" }, -1, "is not key=value");
	expect("jail without value", 1, (char *[]){ "jail=" }, -1, "jail= needs a value");
	expect("relative jail", 1, (char *[]){ "jail=mnt/jail" }, -1, "not an absolute path");
	expect("jail is root", 1, (char *[]){ "jail=/" }, -1, "host's root");
	expect("jail is root slashes", 1, (char *[]){ "jail=///" }, -1, "host's root");
	expect("jail twice", 2, (char *[]){ "jail=/a", "jail=/b" }, -1, "more than once");
	expect("unknown key", 2, (char *[]){ "jail=/a", "mode=strict" }, -1, "unknown argument 'mode'");
	expect("key prefix", 2, (char *[]){ "jail=/a", "jailx=/b" }, -1, "unknown argument 'jailx'");
	expect("key is prefix", 2, (char *[]){ "jail=/a", "old=x" }, -1, "unknown argument 'old'");
	expect("case matters", 1, (char *[]){ "JAIL=/a" }, -1, "unknown argument");
	expect("old_root without value", 2, (char *[]){ "jail=/a", "old_root=" }, -1, "needs a value");
	expect("old_root with slash", 2, (char *[]){ "jail=/a", "old_root=a/b" }, -1, "single directory name");
	expect("old_root dot", 2, (char *[]){ "jail=/a", "old_root=." }, -1, "single directory name");
	expect("old_root dotdot", 2, (char *[]){ "jail=/a", "old_root=.." }, -1, "single directory name");
	expect("old_root twice", 3, (char *[]){ "jail=/a", "old_root=x", "old_root=y" }, -1, "more than once");
	expect("only old_root", 1, (char *[]){ "old_root=x" }, -1, "jail=<path> is required");
	expect("very long jail", 1, (char *[]){ long_jail }, -1, "longer than");
	expect("jail one byte too long", 1, (char *[]){ too_long_jail }, -1, "longer than");
	expect("very long key", 1, (char *[]){ long_key }, -1, "is not key=value");
	long_key_eq[99999] = '=';
	expect("very long unknown key", 1, (char *[]){ long_key_eq }, -1, "unknown argument 'kkk");
	expect("very long old_root", 2, (char *[]){ "jail=/a", long_old_root }, -1, "longer than");
	expect("value with equals", 1, (char *[]){ "jail=/a=b" }, 0, NULL);

	expect_parsed("jail only", 1, (char *[]){ "jail=/mnt/jail" }, "/mnt/jail", CHROOT_DEFAULT_OLD_ROOT);
	expect_parsed("trailing slashes", 1, (char *[]){ "jail=/mnt/jail//" }, "/mnt/jail", CHROOT_DEFAULT_OLD_ROOT);
	expect_parsed("both, any order", 2, (char *[]){ "old_root=.old", "jail=/j" }, "/j", ".old");
	expect_parsed("longest jail", 1, (char *[]){ fits_jail }, fits_jail + strlen("jail="), CHROOT_DEFAULT_OLD_ROOT);
	expect_parsed("longest old_root", 2, (char *[]){ "jail=/j", fits_old_root }, "/j",
		      fits_old_root + strlen("old_root="));

	expect_job_dirs("job dirs unset", NULL, NULL, 0, "");
	expect_job_dirs("job dirs empty", "", "", 0, "");
	expect_job_dirs("job dirs both", "/var/lib/t//", "/var/lib/s", 0, "/var/lib/t");
	expect_job_dirs("job tmp alone", "/t", NULL, -1, "go together");
	expect_job_dirs("job shm alone", NULL, "/s", -1, "go together");
	expect_job_dirs("job tmp relative", "t", "/s", -1, "SLURMCTL_JOB_TMP=t is not an absolute path");
	expect_job_dirs("job shm root", "/t", "//", -1, "SLURMCTL_JOB_SHM=// is the node's root");
	expect_job_dirs("job tmp too long", long_jail + strlen("jail="), "/s", -1, "SLURMCTL_JOB_TMP");

	expect_job_sizes("sizes unset", NULL, NULL, 0, 0, 0, NULL);
	expect_job_sizes("sizes empty", "", "", 0, 0, 0, NULL);
	expect_job_sizes("sizes both", "10737418240", "4096", 0, 10737418240ULL, 4096, NULL);
	expect_job_sizes("tmp size only", "1048576", NULL, 0, 1048576, 0, NULL);
	expect_job_sizes("size below a page", "4095", NULL, -1, 0, 0, "is below 4096 bytes");
	expect_job_sizes("size zero", NULL, "0", -1, 0, 0, "is below 4096 bytes");
	expect_job_sizes("size with a unit", "10Gi", NULL, -1, 0, 0, "SLURMCTL_JOB_TMP_SIZE=10Gi is not a number");
	expect_job_sizes("size negative", "-1", NULL, -1, 0, 0, "is not a number of bytes");
	expect_job_sizes("size with a sign", "+4096", NULL, -1, 0, 0, "is not a number of bytes");
	expect_job_sizes("size with a space", " 4096", NULL, -1, 0, 0, "is not a number of bytes");
	expect_job_sizes("size overflows", "99999999999999999999999", NULL, -1, 0, 0, "is not a number of bytes");
	unsetenv("SLURMCTL_JOB_TMP");
	unsetenv("SLURMCTL_JOB_SHM");
	setenv("SLURMCTL_JOB_TMP_SIZE", "4096", 1);
	expect_job_dirs("size without its directory", NULL, NULL, -1, "SLURMCTL_JOB_TMP_SIZE without its directory");
	unsetenv("SLURMCTL_JOB_TMP_SIZE");

	/* Callers may pass no message buffer, or one too small for any message. */
	cases++;
	if (chroot_args_parse(1, (char *[]){ "bogus" }, &out, NULL, 0) != -1 ||
	    chroot_args_parse(1, (char *[]){ "bogus" }, &out, tiny, sizeof(tiny)) != -1 || tiny[0] != '\0' ||
	    chroot_args_parse(1, (char *[]){ "jail=/j" }, NULL, tiny, sizeof(tiny)) != -1) {
		printf("FAIL small buffers\n");
		return 1;
	}
	printf("ok small buffers\n");

	free(long_jail);
	free(fits_jail);
	free(too_long_jail);
	free(long_key);
	free(long_key_eq);
	free(long_old_root);
	free(fits_old_root);
	printf("ok %d cases\n", cases);
	return 0;
}
