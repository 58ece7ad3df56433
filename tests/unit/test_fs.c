/*
 * test_fs.c - bounded reads, atomic writes, tree removal, and confinement
 * beneath a root (with openat2 and with the fallback walk).
 */
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/limits.h"

static char *tpath(const char *rel)
{
    static char p[8][4096];
    static int next;
    char *s = p[next++ % 8];
    snprintf(s, sizeof(p[0]), "%s/%s", test_tmpdir(), rel);
    return s;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    REQUIRE(fclose(f) == 0);
}

/* Contents of a small file, or "" (static buffer). */
static const char *slurp(const char *path)
{
    static char text[4096];
    text[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return text;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* Entries of a directory other than "." and "..", joined by spaces, sorted. */
static const char *listing(const char *dir)
{
    static char out[4096];
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    out[0] = '\0';
    if (n < 0)
        return "(error)";
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") != 0 && strcmp(names[i]->d_name, "..") != 0)
            len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", len ? " " : "",
                                    names[i]->d_name);
        free(names[i]);
    }
    free(names);
    return out;
}

/* ---- bounded reads ---- */

TEST(read_file_within_limit)
{
    put(tpath("f"), "hello");
    struct buf b;
    buf_init(&b, 1024);
    REQUIRE(buf_addstr(&b, ">") == 0);
    struct ca_err err = {0};
    CHECK_EQ(fs_read_file(tpath("f"), 5, &b, &err), 0);
    CHECK_STR(b.data, ">hello");
    CHECK_EQ(b.len, 6);
    buf_release(&b);
}

TEST(read_file_over_limit)
{
    put(tpath("f"), "hello world");
    struct buf b;
    buf_init(&b, 1024);
    REQUIRE(buf_addstr(&b, "keep") == 0);
    struct ca_err err = {0};
    CHECK_EQ(fs_read_file(tpath("f"), 10, &b, &err), CA_ETOOBIG);
    CHECK_EQ(err.code, CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, tpath("f"));
    CHECK_CONTAINS(err.msg, "10 bytes");
    CHECK_STR(b.data, "keep"); /* unchanged on failure */
    buf_release(&b);
}

TEST(read_file_over_buffer_max)
{
    put(tpath("f"), "0123456789");
    struct buf b;
    buf_init(&b, 8);
    struct ca_err err = {0};
    CHECK_EQ(fs_read_file(tpath("f"), 100, &b, &err), CA_ETOOBIG);
    CHECK_EQ(b.len, 0);
    buf_release(&b);
    /* Exactly filling the buffer is fine. */
    buf_init(&b, 10);
    CHECK_EQ(fs_read_file(tpath("f"), 100, &b, &err), 0);
    CHECK_STR(b.data, "0123456789");
    buf_release(&b);
}

TEST(read_large_file_and_pipe)
{
    /* Several chunks, through a file and through a pipe (no size hint). */
    size_t n = 300000;
    char *data = malloc(n);
    REQUIRE(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)('a' + i % 26);
    FILE *f = fopen(tpath("big"), "w");
    REQUIRE(f && fwrite(data, 1, n, f) == n && fclose(f) == 0);
    struct buf b;
    buf_init(&b, 1 << 20);
    struct ca_err err = {0};
    CHECK_EQ(fs_read_file(tpath("big"), n, &b, &err), 0);
    CHECK(b.len == n && memcmp(b.data, data, n) == 0);
    buf_reset(&b);
    CHECK_EQ(fs_read_file(tpath("big"), n - 1, &b, &err), CA_ETOOBIG);
    buf_reset(&b);

    int p[2];
    REQUIRE(pipe(p) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        size_t off = 0;
        while (off < n) {
            ssize_t w = write(p[1], data + off, n - off);
            if (w <= 0)
                _exit(1);
            off += (size_t)w;
        }
        _exit(0);
    }
    close(p[1]);
    CHECK_EQ(fs_read_fd(p[0], n, &b, "the pipe", &err), 0);
    CHECK(b.len == n && memcmp(b.data, data, n) == 0);
    close(p[0]);
    waitpid(pid, NULL, 0);
    buf_release(&b);
    free(data);
}

TEST(read_missing_file_names_path)
{
    struct buf b;
    buf_init(&b, 1024);
    struct ca_err err = {0};
    CHECK_EQ(fs_read_file(tpath("nope"), 10, &b, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, tpath("nope"));
    CHECK_CONTAINS(err.msg, "No such file");
    buf_release(&b);
}

/* ---- atomic writes ---- */

TEST(write_atomic_creates_and_replaces)
{
    umask(022);
    struct ca_err err = {0};
    CHECK_EQ(fs_write_atomic(tpath("out"), "first", 5, 0640, &err), 0);
    CHECK_STR(slurp(tpath("out")), "first");
    struct stat st;
    REQUIRE(stat(tpath("out"), &st) == 0);
    CHECK_EQ(st.st_mode & 0777, 0640);

    put(tpath("other"), "x");
    CHECK_EQ(fs_write_atomic(tpath("out"), "second!", 7, 0600, &err), 0);
    CHECK_STR(slurp(tpath("out")), "second!");
    CHECK_STR(listing(test_tmpdir()), "other out"); /* no temporaries left */

    CHECK_EQ(fs_write_atomic(tpath("out"), "", 0, 0600, &err), 0);
    CHECK_STR(slurp(tpath("out")), "");
}

TEST(write_atomic_relative_path)
{
    REQUIRE(chdir(test_tmpdir()) == 0);
    struct ca_err err = {0};
    CHECK_EQ(fs_write_atomic("rel", "abc", 3, 0644, &err), 0);
    CHECK_STR(slurp(tpath("rel")), "abc");
    CHECK_STR(listing("."), "rel");
}

TEST(write_atomic_missing_dir)
{
    struct ca_err err = {0};
    int rc = fs_write_atomic(tpath("no/such/file"), "x", 1, 0644, &err);
    CHECK_EQ(rc, -ENOENT);
    CHECK_CONTAINS(err.msg, tpath("no/such/file"));
    CHECK_STR(listing(test_tmpdir()), "");
}

TEST(write_atomic_failure_leaves_nothing)
{
    /* Renaming a file over a directory fails after the temporary exists. */
    REQUIRE(mkdir(tpath("d"), 0755) == 0);
    struct ca_err err = {0};
    int rc = fs_write_atomic(tpath("d"), "x", 1, 0644, &err);
    CHECK(rc < 0);
    CHECK_CONTAINS(err.msg, tpath("d"));
    CHECK_STR(listing(test_tmpdir()), "d");
    CHECK(fs_is_dir(tpath("d")));

    /* A trailing slash names a directory, not a file. */
    CHECK_EQ(fs_write_atomic(tpath("x/"), "x", 1, 0644, &err), -EISDIR);
    CHECK_STR(listing(test_tmpdir()), "d");
}

TEST(write_atomic_replaces_symlink_not_target)
{
    put(tpath("target"), "keep");
    REQUIRE(symlink(tpath("target"), tpath("link")) == 0);
    struct ca_err err = {0};
    CHECK_EQ(fs_write_atomic(tpath("link"), "new", 3, 0644, &err), 0);
    CHECK_STR(slurp(tpath("target")), "keep");
    CHECK(fs_is_file(tpath("link")));
    CHECK_STR(slurp(tpath("link")), "new");
}

/* ---- mkdirs, remove_tree, temp dirs, renames ---- */

TEST(mkdirs_nested_and_existing)
{
    struct ca_err err = {0};
    CHECK_EQ(fs_mkdirs(tpath("a/b//c/"), 0755, &err), 0);
    CHECK(fs_is_dir(tpath("a/b/c")));
    CHECK_EQ(fs_mkdirs(tpath("a/b/c"), 0755, &err), 0);
    CHECK_EQ(fs_mkdirs(tpath("a"), 0755, &err), 0);
    CHECK_EQ(fs_mkdirs("/", 0755, &err), 0);

    put(tpath("file"), "x");
    CHECK_EQ(fs_mkdirs(tpath("file/sub"), 0755, &err), -ENOTDIR);
    CHECK_CONTAINS(err.msg, tpath("file"));
    CHECK_EQ(fs_mkdirs(tpath("file"), 0755, &err), -ENOTDIR);
    CHECK(fs_mkdirs("", 0755, &err) < 0);
}

static void build_tree(const char *top)
{
    char p[4096];
    REQUIRE(mkdir(top, 0755) == 0);
    snprintf(p, sizeof(p), "%s/ro", top);
    REQUIRE(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/ro/inner", top);
    REQUIRE(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/ro/inner/f", top);
    put(p, "x");
    REQUIRE(chmod(p, 0444) == 0);
    snprintf(p, sizeof(p), "%s/ro/inner", top);
    REQUIRE(chmod(p, 0555) == 0);
    snprintf(p, sizeof(p), "%s/ro/g", top);
    put(p, "y");
    snprintf(p, sizeof(p), "%s/ro", top);
    REQUIRE(chmod(p, 0555) == 0);
    snprintf(p, sizeof(p), "%s/locked", top);
    REQUIRE(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/locked/h", top);
    put(p, "z");
    snprintf(p, sizeof(p), "%s/locked", top);
    REQUIRE(chmod(p, 0) == 0);
    snprintf(p, sizeof(p), "%s/plain", top);
    put(p, "w");
    REQUIRE(chmod(p, 0) == 0);
}

TEST(remove_tree_readonly_and_symlinks)
{
    /* Outside the tree: a directory and a file that links point at. */
    REQUIRE(mkdir(tpath("outside"), 0755) == 0);
    put(tpath("outside/precious"), "keep");
    put(tpath("outfile"), "keep");

    build_tree(tpath("t"));
    REQUIRE(symlink(tpath("outside"), tpath("t/dirlink")) == 0);
    REQUIRE(symlink(tpath("outfile"), tpath("t/ro/../filelink")) == 0);
    REQUIRE(symlink("/nonexistent", tpath("t/dangling")) == 0);
    struct ca_err err = {0};
    CHECK_EQ(fs_remove_tree(tpath("t"), &err), 0);
    CHECK(!fs_exists(tpath("t")));
    CHECK_STR(slurp(tpath("outside/precious")), "keep");
    CHECK_STR(slurp(tpath("outfile")), "keep");

    /* A read-only top directory, and a trailing slash. */
    REQUIRE(mkdir(tpath("top"), 0755) == 0);
    put(tpath("top/f"), "x");
    REQUIRE(chmod(tpath("top"), 0555) == 0);
    CHECK_EQ(fs_remove_tree(tpath("top/"), &err), 0);
    CHECK(!fs_exists(tpath("top")));
}

TEST(remove_tree_as_unprivileged_user)
{
    /* Root ignores permission bits; drop to nobody so the chmod path runs. */
    if (geteuid() != 0)
        SKIP("root", "already unprivileged: remove_tree covers it");
    REQUIRE(chmod(test_tmpdir(), 0711) == 0);
    REQUIRE(mkdir(tpath("mine"), 0755) == 0);
    REQUIRE(chown(tpath("mine"), 65534, 65534) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        build_tree(tpath("mine/t"));
        struct ca_err err = {0};
        if (fs_remove_tree(tpath("mine/t"), &err) != 0) {
            fprintf(stderr, "  %s\n", err.msg);
            _exit(1);
        }
        _exit(fs_exists(tpath("mine/t")) ? 2 : 0);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

TEST(remove_tree_deep)
{
    /* Deeper than the removal descends in one go: exercises relocation. */
    REQUIRE(mkdir(tpath("deep"), 0755) == 0);
    int fd = open(tpath("deep"), O_RDONLY | O_DIRECTORY);
    REQUIRE(fd >= 0);
    for (int i = 0; i < 300; i++) {
        REQUIRE(mkdirat(fd, "d", 0755) == 0);
        int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
        REQUIRE(next >= 0);
        if (i % 50 == 0) {
            int f = openat(next, "file", O_WRONLY | O_CREAT, 0644);
            REQUIRE(f >= 0);
            close(f);
        }
        close(fd);
        fd = next;
    }
    close(fd);
    struct ca_err err = {0};
    CHECK_EQ(fs_remove_tree(tpath("deep"), &err), 0);
    CHECK(!fs_exists(tpath("deep")));
    CHECK_STR(listing(test_tmpdir()), "");
}

TEST(remove_tree_single_file_symlink_missing)
{
    struct ca_err err = {0};
    put(tpath("f"), "x");
    CHECK_EQ(fs_remove_tree(tpath("f"), &err), 0);
    CHECK(!fs_exists(tpath("f")));
    CHECK_EQ(fs_remove_tree(tpath("missing"), &err), 0);

    REQUIRE(mkdir(tpath("dir"), 0755) == 0);
    put(tpath("dir/inside"), "keep");
    REQUIRE(symlink(tpath("dir"), tpath("link")) == 0);
    CHECK_EQ(fs_remove_tree(tpath("link"), &err), 0);
    CHECK(!fs_exists(tpath("link")));
    CHECK_STR(slurp(tpath("dir/inside")), "keep");
    /* "link/" must not descend into the target either. */
    REQUIRE(symlink(tpath("dir"), tpath("link")) == 0);
    CHECK_EQ(fs_remove_tree(tpath("link/"), &err), 0);
    CHECK_STR(slurp(tpath("dir/inside")), "keep");

    CHECK_EQ(fs_remove_tree("/", &err), -EINVAL);
    CHECK_EQ(fs_remove_tree(tpath("dir/.."), &err), -EINVAL);
    CHECK(fs_is_dir(tpath("dir")));
}

TEST(mkdtemp_and_rename_noreplace)
{
    struct ca_err err = {0};
    struct buf tmp;
    buf_init(&tmp, CA_LIMIT_PATH);
    const char *dest = tpath("ws");
    CHECK_EQ(fs_mkdtemp_beside(dest, &tmp, &err), 0);
    CHECK(strncmp(tmp.data, dest, strlen(dest)) == 0);
    CHECK_CONTAINS(tmp.data, ".tmp-");
    CHECK(strstr(tmp.data, "XXXXXX") == NULL);
    CHECK(fs_is_dir(tmp.data));
    char inner[4096];
    snprintf(inner, sizeof(inner), "%s/f", tmp.data);
    put(inner, "x");

    CHECK_EQ(fs_rename_noreplace(tmp.data, dest, &err), 0);
    CHECK_STR(slurp(tpath("ws/f")), "x");

    buf_reset(&tmp);
    CHECK_EQ(fs_mkdtemp_beside(dest, &tmp, &err), 0);
    CHECK_EQ(fs_rename_noreplace(tmp.data, dest, &err), -EEXIST);
    CHECK_CONTAINS(err.msg, "already exists");
    CHECK_CONTAINS(err.msg, dest);
    CHECK(fs_is_dir(tmp.data));
    CHECK_STR(slurp(tpath("ws/f")), "x");

    buf_reset(&tmp);
    CHECK(fs_mkdtemp_beside(tpath("no/such"), &tmp, &err) < 0);
    CHECK_CONTAINS(err.msg, tpath("no/such"));
    CHECK_EQ(tmp.len, 0);
    buf_release(&tmp);
}

TEST(predicates_join_basename)
{
    put(tpath("f"), "x");
    REQUIRE(mkdir(tpath("d"), 0755) == 0);
    REQUIRE(symlink("/nonexistent", tpath("dangling")) == 0);
    CHECK(fs_is_file(tpath("f")));
    CHECK(!fs_is_dir(tpath("f")));
    CHECK(fs_is_dir(tpath("d")));
    CHECK(!fs_is_file(tpath("d")));
    CHECK(fs_exists(tpath("dangling")));
    CHECK(!fs_is_file(tpath("dangling")));
    CHECK(!fs_exists(tpath("nope")));

    struct buf b;
    buf_init(&b, 64);
    CHECK_EQ(fs_join(&b, "a", "b"), 0);
    CHECK_STR(b.data, "a/b");
    buf_reset(&b);
    CHECK_EQ(fs_join(&b, "a//", "/b"), 0);
    CHECK_STR(b.data, "a/b");
    buf_reset(&b);
    CHECK_EQ(fs_join(&b, "/", "b"), 0);
    CHECK_STR(b.data, "/b");
    buf_reset(&b);
    CHECK_EQ(fs_join(&b, "", "b"), 0);
    CHECK_STR(b.data, "b");
    buf_release(&b);
    buf_init(&b, 4);
    REQUIRE(buf_addstr(&b, "x") == 0);
    CHECK_EQ(fs_join(&b, "abc", "def"), CA_ETOOBIG);
    CHECK_STR(b.data, "x");
    buf_release(&b);

    CHECK_STR(fs_basename("a/b/c.txt"), "c.txt");
    CHECK_STR(fs_basename("c"), "c");
    CHECK_STR(fs_basename("/c"), "c");
    CHECK_STR(fs_basename("a/"), "");
}

/* ---- confinement ---- */

TEST(check_relpath)
{
    struct ca_err err = {0};
    CHECK_EQ(fs_check_relpath("a", &err), 0);
    CHECK_EQ(fs_check_relpath("a/b/c.txt", &err), 0);
    CHECK_EQ(fs_check_relpath("./a//b/", &err), 0);
    CHECK_EQ(fs_check_relpath(".", &err), 0);
    CHECK_EQ(fs_check_relpath("..a/b..", &err), 0);
    CHECK_EQ(fs_check_relpath(".hidden", &err), 0);

    CHECK_EQ(fs_check_relpath("", &err), CA_EPARSE);
    CHECK_EQ(fs_check_relpath("/etc/passwd", &err), CA_EESCAPE);
    CHECK_CONTAINS(err.msg, "/etc/passwd");
    CHECK_EQ(fs_check_relpath("..", &err), CA_EESCAPE);
    CHECK_EQ(fs_check_relpath("../x", &err), CA_EESCAPE);
    CHECK_EQ(fs_check_relpath("a/../b", &err), CA_EESCAPE);
    CHECK_CONTAINS(err.msg, "a/../b");
    CHECK_EQ(fs_check_relpath("a/..", &err), CA_EESCAPE);
    CHECK_EQ(fs_check_relpath("a/../", &err), CA_EESCAPE);

    /* Depth: 64 components pass, 65 do not. */
    char deep[512] = "";
    size_t len = 0;
    for (int i = 0; i < CA_LIMIT_PATH_DEPTH; i++)
        len += (size_t)snprintf(deep + len, sizeof(deep) - len, "%sd", i ? "/" : "");
    CHECK_EQ(fs_check_relpath(deep, &err), 0);
    snprintf(deep + len, sizeof(deep) - len, "/d");
    CHECK_EQ(fs_check_relpath(deep, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "components");

    /* Length: CA_LIMIT_PATH bytes pass, one more does not. */
    char *longp = malloc(CA_LIMIT_PATH + 2);
    REQUIRE(longp);
    memset(longp, 'a', CA_LIMIT_PATH + 1);
    longp[CA_LIMIT_PATH] = '\0';
    CHECK_EQ(fs_check_relpath(longp, &err), 0);
    longp[CA_LIMIT_PATH] = 'a';
    longp[CA_LIMIT_PATH + 1] = '\0';
    CHECK_EQ(fs_check_relpath(longp, &err), CA_ETOOBIG);
    free(longp);
}

/*
 * The root:  root/sub/file ("inside"), root/etc -> /etc, root/up -> ..,
 * root/in -> sub, root/fin -> sub/file, root/abs -> /etc/passwd,
 * root/outdir -> <tmp>/outside.  Next to it: <tmp>/outside/secret.
 */
static void make_root(struct fs_root *root)
{
    REQUIRE(mkdir(tpath("root"), 0755) == 0);
    REQUIRE(mkdir(tpath("root/sub"), 0755) == 0);
    put(tpath("root/sub/file"), "inside");
    REQUIRE(mkdir(tpath("outside"), 0755) == 0);
    put(tpath("outside/secret"), "secret");
    REQUIRE(symlink("/etc", tpath("root/etc")) == 0);
    REQUIRE(symlink("..", tpath("root/up")) == 0);
    REQUIRE(symlink("sub", tpath("root/in")) == 0);
    REQUIRE(symlink("sub/file", tpath("root/fin")) == 0);
    REQUIRE(symlink("/etc/passwd", tpath("root/abs")) == 0);
    REQUIRE(symlink(tpath("outside"), tpath("root/outdir")) == 0);
    struct ca_err err = {0};
    REQUIRE(fs_root_open(root, tpath("root"), &err) == 0);
}

static void expect_escape(const struct fs_root *root, const char *rel, int flags)
{
    struct ca_err err = {0};
    int fd = fs_root_open_at(root, rel, flags, 0644, &err);
    if (fd >= 0)
        close(fd);
    CHECK_EQ(fd, CA_EESCAPE);
    CHECK_EQ(err.code, CA_EESCAPE);
    CHECK_CONTAINS(err.msg, rel);
}

static void expect_open(const struct fs_root *root, const char *rel, const char *text)
{
    struct ca_err err = {0};
    struct buf b;
    buf_init(&b, 1024);
    int rc = fs_root_read(root, rel, 1024, &b, &err);
    if (rc)
        fprintf(stderr, "  %s: %s\n", rel, err.msg);
    CHECK_EQ(rc, 0);
    CHECK_STR(b.data, text);
    buf_release(&b);
}

static void root_suite(bool with_openat2)
{
    fs__force_no_openat2(!with_openat2);
    struct fs_root root;
    make_root(&root);
    struct ca_err err = {0};

    expect_open(&root, "sub/file", "inside");
    expect_open(&root, "./sub//file", "inside");

    /* Lexical refusals, before any syscall. */
    expect_escape(&root, "../x", O_RDONLY);
    expect_escape(&root, "/etc/passwd", O_RDONLY);
    expect_escape(&root, "a/../../x", O_RDONLY);
    expect_escape(&root, "sub/../sub/file", O_RDONLY);

    /* Symlinks that leave the root: always refused, naming root and path. */
    expect_escape(&root, "etc/passwd", O_RDONLY);
    struct ca_err e2 = {0};
    CHECK_EQ(fs_root_open_at(&root, "etc/passwd", O_RDONLY, 0, &e2), CA_EESCAPE);
    CHECK_CONTAINS(e2.msg, tpath("root"));
    expect_escape(&root, "up/outside/secret", O_RDONLY);
    expect_escape(&root, "outdir/secret", O_RDONLY);
    expect_escape(&root, "abs", O_RDONLY);
    expect_escape(&root, "etc", O_RDONLY | O_DIRECTORY);
    expect_escape(&root, "etc", O_PATH);
    expect_escape(&root, "outdir/new", O_WRONLY | O_CREAT);
    CHECK(!fs_exists(tpath("outside/new")));

    /* Symlinks that stay inside: followed with openat2, refused by the walk. */
    if (with_openat2) {
        expect_open(&root, "in/file", "inside");
        expect_open(&root, "fin", "inside");
    } else {
        expect_escape(&root, "in/file", O_RDONLY);
        expect_escape(&root, "fin", O_RDONLY);
    }
    /* O_NOFOLLOW: a final symlink is never followed. */
    expect_escape(&root, "fin", O_RDONLY | O_NOFOLLOW);

    /* Plain errors stay plain. */
    int fd = fs_root_open_at(&root, "sub/missing", O_RDONLY, 0, &err);
    CHECK_EQ(fd, -ENOENT);
    CHECK_CONTAINS(err.msg, "sub/missing");
    fd = fs_root_open_at(&root, "sub/file/x", O_RDONLY, 0, &err);
    CHECK_EQ(fd, -ENOTDIR);

    /* Opening the root itself and creating a file. */
    fd = fs_root_open_at(&root, ".", O_RDONLY | O_DIRECTORY, 0, &err);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    fd = fs_root_open_at(&root, "sub/created", O_WRONLY | O_CREAT | O_EXCL, 0600, &err);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(fs_is_file(tpath("root/sub/created")));

    /* Reads: bounded, regular files only. */
    struct buf b;
    buf_init(&b, 1024);
    CHECK_EQ(fs_root_read(&root, "sub/file", 3, &b, &err), CA_ETOOBIG);
    CHECK_EQ(fs_root_read(&root, "sub", 100, &b, &err), -EINVAL);
    REQUIRE(mkfifo(tpath("root/fifo"), 0644) == 0);
    CHECK_EQ(fs_root_read(&root, "fifo", 100, &b, &err), -EINVAL);
    CHECK_EQ(fs_root_read(&root, "etc/passwd", 100000, &b, &err), CA_EESCAPE);
    CHECK_EQ(b.len, 0);
    buf_release(&b);

    /* Atomic writes beneath the root. */
    CHECK_EQ(fs_root_write_atomic(&root, "sub/w.txt", "data", 4, 0644, &err), 0);
    CHECK_STR(slurp(tpath("root/sub/w.txt")), "data");
    CHECK_EQ(fs_root_write_atomic(&root, "sub/w.txt", "more", 4, 0644, &err), 0);
    CHECK_STR(slurp(tpath("root/sub/w.txt")), "more");
    CHECK_EQ(fs_root_write_atomic(&root, "top.txt", "t", 1, 0644, &err), 0);
    CHECK_STR(slurp(tpath("root/top.txt")), "t");
    CHECK_STR(listing(tpath("root/sub")), "created file w.txt");
    CHECK_EQ(fs_root_write_atomic(&root, "outdir/secret", "pwned", 5, 0644, &err), CA_EESCAPE);
    CHECK_EQ(fs_root_write_atomic(&root, "up/outside/secret", "pwned", 5, 0644, &err), CA_EESCAPE);
    CHECK_EQ(fs_root_write_atomic(&root, "../outside/secret", "pwned", 5, 0644, &err), CA_EESCAPE);
    CHECK_STR(slurp(tpath("outside/secret")), "secret");
    CHECK_STR(listing(tpath("outside")), "secret");
    CHECK_EQ(fs_root_write_atomic(&root, "nodir/f", "x", 1, 0644, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "nodir");
    /* A symlink as the target itself is replaced, its target untouched. */
    CHECK_EQ(fs_root_write_atomic(&root, "abs", "x", 1, 0644, &err), 0);
    CHECK(fs_is_file(tpath("root/abs")));

    /* mkdirs beneath the root. */
    CHECK_EQ(fs_root_mkdirs(&root, "x/y/z", 0755, &err), 0);
    CHECK(fs_is_dir(tpath("root/x/y/z")));
    CHECK_EQ(fs_root_mkdirs(&root, "x/y/z", 0755, &err), 0);
    CHECK_EQ(fs_root_mkdirs(&root, "./x//w/", 0755, &err), 0);
    CHECK(fs_is_dir(tpath("root/x/w")));
    CHECK_EQ(fs_root_mkdirs(&root, "outdir/evil", 0755, &err), CA_EESCAPE);
    CHECK_EQ(fs_root_mkdirs(&root, "up/evil", 0755, &err), CA_EESCAPE);
    CHECK_EQ(fs_root_mkdirs(&root, "../evil", 0755, &err), CA_EESCAPE);
    CHECK(!fs_exists(tpath("outside/evil")));
    CHECK(!fs_exists(tpath("evil")));
    CHECK_EQ(fs_root_mkdirs(&root, "sub/file/x", 0755, &err), -ENOTDIR);
    if (with_openat2) {
        CHECK_EQ(fs_root_mkdirs(&root, "in/deeper", 0755, &err), 0);
        CHECK(fs_is_dir(tpath("root/sub/deeper")));
    } else {
        CHECK_EQ(fs_root_mkdirs(&root, "in/deeper", 0755, &err), CA_EESCAPE);
    }

    fs_root_release(&root);
    CHECK_EQ(root.fd, -1);
    CHECK(root.path == NULL);
    fs_root_release(&root); /* twice is fine */
    fs__force_no_openat2(false);
}

TEST(root_confinement_openat2)
{
    if (!fs_have_openat2())
        SKIP("openat2", "the kernel has no openat2");
    root_suite(true);
}

TEST(root_confinement_fallback_walk)
{
    root_suite(false);
}

TEST(root_open_missing)
{
    struct fs_root root;
    struct ca_err err = {0};
    CHECK_EQ(fs_root_open(&root, tpath("nope"), &err), -ENOENT);
    CHECK_CONTAINS(err.msg, tpath("nope"));
    CHECK_EQ(root.fd, -1);
    fs_root_release(&root);
    put(tpath("file"), "x");
    CHECK_EQ(fs_root_open(&root, tpath("file"), &err), -ENOTDIR);
}

TEST(no_fd_leaks)
{
    /* Every path through the module closes what it opened. */
    int before = open("/dev/null", O_RDONLY);
    REQUIRE(before >= 0);
    close(before);
    struct fs_root root;
    make_root(&root);
    struct ca_err err = {0};
    struct buf b;
    buf_init(&b, 1024);
    for (int pass = 0; pass < 2; pass++) {
        fs__force_no_openat2(pass == 1);
        CHECK(fs_root_read(&root, "sub/file", 100, &b, &err) == 0);
        CHECK(fs_root_read(&root, "etc/passwd", 100, &b, &err) < 0);
        CHECK(fs_root_read(&root, "sub/nope", 100, &b, &err) < 0);
        CHECK(fs_root_write_atomic(&root, "sub/w", "x", 1, 0644, &err) == 0);
        CHECK(fs_root_write_atomic(&root, "outdir/w", "x", 1, 0644, &err) < 0);
        CHECK(fs_root_mkdirs(&root, "m/n", 0755, &err) == 0);
        CHECK(fs_root_mkdirs(&root, "outdir/n", 0755, &err) < 0);
    }
    fs__force_no_openat2(false);
    CHECK(fs_write_atomic(tpath("w"), "x", 1, 0644, &err) == 0);
    CHECK(fs_write_atomic(tpath("nodir/w"), "x", 1, 0644, &err) < 0);
    CHECK(fs_remove_tree(tpath("root/sub"), &err) == 0);
    buf_release(&b);
    fs_root_release(&root);
    int after = open("/dev/null", O_RDONLY);
    CHECK_EQ(after, before);
    close(after);
}
