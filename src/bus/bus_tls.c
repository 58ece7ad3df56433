/*
 * bus_tls.c - rediss:// on a hiredis without TLS (Debian 12 ships hiredis 0.14, whose
 * hiredis_ssl did not exist yet): this file makes the TLS connection with OpenSSL's libssl and
 * hands hiredis one end of a socketpair; a thread relays bytes between the other end and the
 * TLS connection. hiredis reads and writes plain RESP on its end as on any socket (its
 * timeouts included); closing that end (redisFree) ends the thread, and the server closing
 * the TLS connection shuts the socketpair for writing, which hiredis sees as a lost
 * connection (the thread then discards what hiredis still writes until it closes its end).
 *
 * The server is verified: its certificate against $CUDA_AGENT_REDIS_CACERT (a PEM file) or,
 * without it, the system's trust store, and its name (or IP address) against the URL's host.
 * $CUDA_AGENT_REDIS_CERT and $CUDA_AGENT_REDIS_KEY give a client certificate, for a server
 * with `tls-auth-clients yes`. TLS 1.2 at least.
 */
#include "bus/bus_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "core/banned.h"

#define RELAY_BUF 16384

struct bus__tls {
    pthread_t thread;
    int tcp;   /* the TLS connection's socket */
    int plain; /* our end of the socketpair */
    SSL_CTX *ctx;
    SSL *ssl;
    bool asked_for_cert; /* the server asked for a client certificate and we had none */
    /* Why the relay's TLS connection ended, when OpenSSL said (written before `ended`). */
    char why[320];
    atomic_bool ended;
};

static int set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The first of OpenSSL's queued errors, its words only ("certificate verify failed", not
 * "error:0A000086:SSL routines::certificate verify failed"; "" when none); the queue cleared. */
static void ssl_reason(char *buf, size_t cap)
{
    unsigned long e = ERR_get_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    if (r)
        snprintf(buf, cap, "%s", r);
    else if (e)
        ERR_error_string_n(e, buf, cap);
    else
        snprintf(buf, cap, "%s", "");
    ERR_clear_error();
}

/* What to do when the server asked for a client certificate and we had none. */
#define CERT_HINT "set $CUDA_AGENT_REDIS_CERT and $CUDA_AGENT_REDIS_KEY"

/* A TCP connection to host:port within the deadline (every address getaddrinfo gives). */
static int tcp_connect(const struct bus_url *u, int64_t deadline, char *why, size_t cap)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", u->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(u->host, port, &hints, &res);
    if (gai) {
        snprintf(why, cap, "cannot resolve %s: %s", u->host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    snprintf(why, cap, "no address for %s", u->host);
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            snprintf(why, cap, "socket: %s", strerror(errno));
            continue;
        }
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int64_t left = deadline - ca_now_us() / 1000;
            int n = left > 0 ? poll(&p, 1, (int)left) : 0;
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                rc = 0;
            else
                errno = n == 1 ? soerr : ETIMEDOUT;
        }
        if (rc < 0) {
            snprintf(why, cap, "%s", strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int on = 1; /* best effort: dead peers are found by the command timeouts too */
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    }
    return fd;
}

/* OpenSSL asks for a client certificate the server requested; none configured: say none. */
static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    struct bus__tls *t = SSL_get_app_data(ssl);
    t->asked_for_cert = true;
    return 0;
}

static SSL_CTX *make_ctx(char *why, size_t cap)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        ssl_reason(why, cap);
        return NULL;
    }
    const char *ca = getenv("CUDA_AGENT_REDIS_CACERT");
    const char *cert = getenv("CUDA_AGENT_REDIS_CERT");
    const char *key = getenv("CUDA_AGENT_REDIS_KEY");
    char reason[200];
    bool ok = SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1;
    if (ok && ca && *ca && SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        ssl_reason(reason, sizeof(reason));
        snprintf(why, cap, "cannot read $CUDA_AGENT_REDIS_CACERT %s (%s)", ca, reason);
        ok = false;
    } else if (ok && !(ca && *ca) && SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ssl_reason(reason, sizeof(reason));
        snprintf(why, cap,
                 "cannot load the system's trust store (%s); set $CUDA_AGENT_REDIS_CACERT", reason);
        ok = false;
    }
    if (ok && ((cert && *cert) != (key && *key))) {
        snprintf(why, cap, "%s", "$CUDA_AGENT_REDIS_CERT and $CUDA_AGENT_REDIS_KEY go together");
        ok = false;
    } else if (ok && cert && *cert &&
               (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
                SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
                SSL_CTX_check_private_key(ctx) != 1)) {
        ssl_reason(reason, sizeof(reason));
        snprintf(why, cap, "cannot use the client certificate %s with key %s (%s)", cert, key,
                 reason);
        ok = false;
    }
    if (!ok) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (!(cert && *cert))
        SSL_CTX_set_client_cert_cb(ctx, no_client_cert);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return ctx;
}

/* The handshake on a non-blocking socket, within the deadline, the server's name checked. */
static int handshake(struct bus__tls *t, const struct bus_url *u, int64_t deadline, char *why,
                     size_t cap)
{
    t->ssl = SSL_new(t->ctx);
    if (!t->ssl || SSL_set_fd(t->ssl, t->tcp) != 1) {
        ssl_reason(why, cap);
        return -1;
    }
    SSL_set_app_data(t->ssl, t);
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, u->host, ip) == 1 || inet_pton(AF_INET6, u->host, ip) == 1;
    X509_VERIFY_PARAM *param = SSL_get0_param(t->ssl);
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, u->host) != 1
              : (SSL_set_tlsext_host_name(t->ssl, u->host) != 1 ||
                 SSL_set1_host(t->ssl, u->host) != 1)) {
        ssl_reason(why, cap);
        return -1;
    }
    for (;;) {
        int r = SSL_connect(t->ssl);
        if (r == 1)
            return 0;
        int e = SSL_get_error(t->ssl, r);
        short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!ev) {
            long v = SSL_get_verify_result(t->ssl);
            char reason[200];
            ssl_reason(reason, sizeof(reason));
            if (v != X509_V_OK)
                snprintf(why, cap,
                         "the server's certificate was not accepted: %s (set "
                         "$CUDA_AGENT_REDIS_CACERT to the CA that signed it)",
                         X509_verify_cert_error_string(v));
            else
                snprintf(why, cap, "TLS handshake failed: %s%s",
                         reason[0] ? reason : "the server closed the connection",
                         t->asked_for_cert ? "; no client certificate was given: " CERT_HINT : "");
            return -1;
        }
        struct pollfd p = {.fd = t->tcp, .events = ev};
        int64_t left = deadline - ca_now_us() / 1000;
        if (left <= 0 || poll(&p, 1, (int)left) == 0) {
            snprintf(why, cap, "%s", "TLS handshake timed out (is that port TLS?)");
            return -1;
        }
    }
}

/* Which poll event an SSL call that returned r wants, 0 when it failed for good (the reason
 * kept in t->why). */
static short ssl_wants(struct bus__tls *t, int r, bool *closed)
{
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return POLLIN;
    if (e == SSL_ERROR_WANT_WRITE)
        return POLLOUT;
    *closed = true;
    char reason[160] = "";
    if (e == SSL_ERROR_SSL)
        ssl_reason(reason, sizeof(reason));
    /* The server's alert may be lost with a reset connection: its request for a certificate
     * we had none for is then the likelier cause (hedged: an optional one is no cause). */
    if (reason[0])
        snprintf(t->why, sizeof(t->why), "TLS: %s%s", reason,
                 t->asked_for_cert ? "; no client certificate was given: " CERT_HINT : "");
    else if (t->asked_for_cert)
        snprintf(t->why, sizeof(t->why), "%s",
                 "TLS: closed; the server asked for a client certificate and got none: if it "
                 "requires one, " CERT_HINT);
    ERR_clear_error();
    return 0;
}

/*
 * The relay: bytes from hiredis (plain) to the server (up), and back (down), one buffer each
 * way, everything non-blocking, until either side closes. Signals are blocked here, so that a
 * write to a closed peer is EPIPE and every signal goes to the program's own threads.
 */
static void *relay(void *arg)
{
    struct bus__tls *t = arg;
    sigset_t all;
    sigfillset(&all);
    (void)pthread_sigmask(SIG_BLOCK, &all, NULL);
    _Static_assert(RELAY_BUF <= 65536, "one buffer each way, on the relay's stack");
    char up[RELAY_BUF], down[RELAY_BUF];
    size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;
    bool plain_closed = false, tls_closed = false;
    while (!plain_closed && !(tls_closed && down_off == down_len)) {
        bool moved = false;
        short write_wants = 0, read_wants = 0;
        if (up_off == up_len) {
            ssize_t n = read(t->plain, up, sizeof(up));
            if (n > 0) {
                up_len = (size_t)n, up_off = 0, moved = true;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                break; /* hiredis closed its end (redisFree) */
            }
        }
        if (up_off < up_len && !tls_closed) {
            int r = SSL_write(t->ssl, up + up_off, (int)(up_len - up_off));
            if (r > 0)
                up_off += (size_t)r, moved = true;
            else
                write_wants = ssl_wants(t, r, &tls_closed);
        }
        if (down_off == down_len && !tls_closed) {
            int r = SSL_read(t->ssl, down, (int)sizeof(down));
            if (r > 0)
                down_len = (size_t)r, down_off = 0, moved = true;
            else
                read_wants = ssl_wants(t, r, &tls_closed);
        }
        if (down_off < down_len) {
            ssize_t n = send(t->plain, down + down_off, down_len - down_off, MSG_NOSIGNAL);
            if (n > 0)
                down_off += (size_t)n, moved = true;
            else if (n < 0 && errno != EAGAIN && errno != EINTR)
                plain_closed = true;
        }
        if (moved || plain_closed || (tls_closed && down_off == down_len))
            continue; /* the loop's condition ends it once a side is closed and drained */
        /* Nothing moved: wait for what would move something (an fd with nothing to wait
         * for is left out, so that its hang-up cannot spin the loop). */
        short plain_ev =
            (short)((up_off == up_len ? POLLIN : 0) | (down_off < down_len ? POLLOUT : 0));
        short tcp_ev = tls_closed ? 0 : (short)(write_wants | read_wants);
        struct pollfd p[2] = {
            {.fd = plain_ev ? t->plain : -1, .events = plain_ev},
            {.fd = tcp_ev ? t->tcp : -1, .events = tcp_ev},
        };
        if (!plain_ev && !tcp_ev)
            break; /* cannot happen: a buffer is always empty or waiting on one side */
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
    }
    if (!tls_closed)
        (void)SSL_shutdown(t->ssl); /* one try: a close_notify if the socket takes it now */
    ERR_clear_error();
    atomic_store_explicit(&t->ended, true, memory_order_release);
    /* Our end shut both ways: hiredis reads EOF, and a write of its fails with EPIPE rather
     * than filling a buffer nobody reads. That write's SIGPIPE is bus_conn.c's concern: every
     * hiredis command runs under its guard (core/sigpipe.h). */
    (void)shutdown(t->plain, SHUT_RDWR);
    return NULL;
}

static void tls_free(struct bus__tls *t)
{
    if (t->ssl)
        SSL_free(t->ssl);
    if (t->ctx)
        SSL_CTX_free(t->ctx);
    if (t->tcp >= 0)
        close(t->tcp);
    if (t->plain >= 0)
        close(t->plain);
    free(t);
}

int bus__tls_open(const struct bus_url *u, int timeout_ms, struct bus__tls **out, int *plain_fd,
                  char *why, size_t cap)
{
    int64_t deadline = ca_now_us() / 1000 + timeout_ms;
    struct bus__tls *t = xcalloc(1, sizeof(*t));
    t->tcp = t->plain = -1;
    int sv[2];
    if (!(t->ctx = make_ctx(why, cap)) || (t->tcp = tcp_connect(u, deadline, why, cap)) < 0 ||
        handshake(t, u, deadline, why, cap) != 0)
        goto fail;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, cap, "socketpair: %s", strerror(errno));
        goto fail;
    }
    t->plain = sv[0];
    if (set_nonblocking(t->plain) != 0) {
        snprintf(why, cap, "fcntl: %s", strerror(errno));
        close(sv[1]);
        goto fail;
    }
    int rc = pthread_create(&t->thread, NULL, relay, t);
    if (rc) {
        snprintf(why, cap, "cannot start the TLS relay thread: %s", strerror(rc));
        close(sv[1]);
        goto fail;
    }
    *out = t;
    *plain_fd = sv[1];
    return 0;
fail:
    tls_free(t);
    return -1;
}

const char *bus__tls_why(const struct bus__tls *t)
{
    if (!t || !atomic_load_explicit(&t->ended, memory_order_acquire))
        return "";
    return t->why;
}

void bus__tls_close(struct bus__tls *t)
{
    if (!t)
        return;
    /* hiredis closed its end already (redisFree): the relay reads EOF and ends. */
    (void)pthread_join(t->thread, NULL);
    tls_free(t);
}
