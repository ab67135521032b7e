// The output folder, written whole or not at all. mtc writes the program into
// a hidden folder beside the target (.NAME.mtc-PID, on the same file system)
// and renames it onto the target once every file is written, so an error, a
// full disk or a signal leaves the target as it was (absent, or the program a
// compile before wrote). A target that exists must be empty or a folder mtc
// wrote (its Makefile says so): mtc never replaces other files.
#define _XOPEN_SOURCE 700
#include "codegen.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char tag[] = ".mtc-";

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path) != 0 && errno != ENOENT;
}

static void remove_tree(const char *path) {
  if (path[0])
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

// Is dir empty, or a program mtc wrote (a Makefile that starts "# Built by mtc")?
static bool replaceable(const char *dir) {
  char path[4200], line[64] = "";
  snprintf(path, sizeof path, "%s/Makefile", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    bool ours = fgets(line, sizeof line, f) && !strncmp(line, "# Built by mtc", 14);
    fclose(f);
    return ours;
  }
  DIR *d = opendir(dir);
  if (!d)
    return false;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n == 0;
}

// The temporary folders of earlier compiles of the same target whose process
// is gone (killed before it could clean up).
static void remove_stale(const char *parent, const char *base) {
  DIR *d = opendir(parent);
  if (!d)
    return;
  char prefix[300];
  snprintf(prefix, sizeof prefix, ".%s%s", base, tag);
  size_t n = strlen(prefix);
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, n))
      continue;
    const char *pid = e->d_name + n;
    if (!strncmp(pid, "old-", 4) || !strncmp(pid, "gone-", 5))
      pid = strchr(pid, '-') + 1;
    char *end;
    long p = strtol(pid, &end, 10);
    if (*end || p <= 0 || (kill((pid_t)p, 0) != 0 && errno == ESRCH)) {
      char path[4400];
      snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
      remove_tree(path);
    }
  }
  closedir(d);
}

int cg_outdir_begin(CgOutdir *o, const char *target, IrDiag *d) {
  memset(o, 0, sizeof *o);
  if (!target[0] || strlen(target) >= sizeof o->target - 64)
    return ir_error(d, (IrLoc){0}, "-o: the output folder's name is empty or too long");
  snprintf(o->target, sizeof o->target, "%s", target);
  size_t len = strlen(o->target);
  while (len > 1 && o->target[len - 1] == '/')
    o->target[--len] = '\0';
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s", o->target);
  snprintf(b, sizeof b, "%s", o->target);
  const char *parent = dirname(a), *base = basename(b);
  if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/"))
    return ir_error(d, (IrLoc){0}, "-o %s: name a folder for the program (not . or ..)", target);
  struct stat st;
  if (lstat(o->target, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return ir_error(d, (IrLoc){0}, "-o %s exists and is not a folder", target);
    if (!replaceable(o->target))
      return ir_error(d, (IrLoc){0}, "-o %s is a folder mtc did not write (it has files and no "
                      "Makefile of mtc's): choose another output folder, or empty it", target);
  } else if (errno != ENOENT) {
    return ir_error(d, (IrLoc){0}, "-o %s: %s", target, strerror(errno));
  }
  remove_stale(parent, base);
  snprintf(o->tmp, sizeof o->tmp, "%s/.%s%s%ld", parent, base, tag, (long)getpid());
  snprintf(o->old, sizeof o->old, "%s/.%s%sold-%ld", parent, base, tag, (long)getpid());
  snprintf(o->doomed, sizeof o->doomed, "%s/.%s%sgone-%ld", parent, base, tag, (long)getpid());
  remove_tree(o->tmp);
  if (mkdir(o->tmp, 0755) != 0) {
    int err = errno;
    o->tmp[0] = '\0';
    return ir_error(d, (IrLoc){0}, "cannot create a folder in %s for the program: %s", parent,
                    strerror(err));
  }
  return 0;
}

int cg_outdir_commit(CgOutdir *o, IrDiag *d) {
  struct stat st;
  bool had = lstat(o->target, &st) == 0;
  if (had && rename(o->target, o->old) != 0)
    return ir_error(d, (IrLoc){0}, "cannot move the old %s aside: %s", o->target, strerror(errno));
  if (rename(o->tmp, o->target) != 0) {
    int err = errno;
    if (had)
      rename(o->old, o->target);  // the old program back where it was
    return ir_error(d, (IrLoc){0}, "cannot rename the program's folder to %s: %s", o->target,
                    strerror(err));
  }
  o->tmp[0] = '\0';
  if (had)
    remove_tree(o->old);
  return 0;
}

// Also from a signal handler, in any thread, while the main thread may still
// be writing: the folder is renamed first, so that no file can be created in
// it after (a write by path then fails), and then removed.
void cg_outdir_abort(CgOutdir *o) {
  if (o->tmp[0] && rename(o->tmp, o->doomed) == 0)
    remove_tree(o->doomed);
  o->tmp[0] = '\0';
  struct stat st;
  if (o->old[0] && lstat(o->target, &st) != 0 && lstat(o->old, &st) == 0)
    rename(o->old, o->target);  // a signal between commit's two renames
}
