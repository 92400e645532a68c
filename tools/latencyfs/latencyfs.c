/*
 * latencyfs: a passthrough FUSE filesystem that makes every request a "round trip".
 *
 * It mirrors a local directory at a mount point, holds each request's reply back a configurable
 * delay (plus jitter) after doing the real work, and counts what it was asked: requests by kind, the
 * most and the average in flight. Copy tools run against it behave as on an NFS share whose
 * server is that many milliseconds away, and the counts say how many round trips a tool needs
 * per file, independently of timing noise.
 *
 * Built on libfuse3's low-level API with its multi-threaded loop: requests run in parallel, up
 * to --threads in flight (see hold_reply and default_threads()), lookups in one directory too
 * (see the comment above writev). The kernel writeback cache is on by default,
 * because NFS clients cache writes too; without it every small write() would be a round trip.
 *
 *   latencyfs [options] SOURCE MOUNTPOINT
 *   latencyfs ctl SOCKET stats|reset|snapshot
 *
 * Usage and the meaning of every counter: README.md next to this file.
 */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#define _GNU_SOURCE

#include <fuse_lowlevel.h>
#include <linux/fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Request kinds                                                                               */
/* ------------------------------------------------------------------------------------------ */

#define OP_KINDS(X)                                                                            \
	X(LOOKUP, "lookup") X(GETATTR, "getattr") X(SETATTR, "setattr") X(READLINK, "readlink")    \
	X(MKNOD, "mknod") X(MKDIR, "mkdir") X(UNLINK, "unlink") X(RMDIR, "rmdir")                  \
	X(SYMLINK, "symlink") X(RENAME, "rename") X(LINK, "link") X(OPEN, "open") X(READ, "read")  \
	X(WRITE, "write") X(FLUSH, "flush") X(RELEASE, "release") X(FSYNC, "fsync")                \
	X(OPENDIR, "opendir") X(READDIR, "readdir") X(READDIRPLUS, "readdirplus")                  \
	X(RELEASEDIR, "releasedir") X(FSYNCDIR, "fsyncdir") X(STATFS, "statfs")                    \
	X(CREATE, "create") X(FALLOCATE, "fallocate") X(LSEEK, "lseek") X(FORGET, "forget")        \
	X(CTIME_FLUSH, "ctime_flush")

enum op {
#define X(id, name) OP_##id,
	OP_KINDS(X)
#undef X
	OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
#define X(id, name) name,
	OP_KINDS(X)
#undef X
};

/* Messages that are no round trip on NFS: counted, never delayed, not in `total` nor in flight.
 * A forget is the kernel dropping an inode reference (one-way, NFS has no such call); a
 * ctime flush, see c_setattr. */
static bool round_trip(int op)
{
	return op != OP_FORGET && op != OP_CTIME_FLUSH;
}

/* ------------------------------------------------------------------------------------------ */
/* Settings                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static struct {
	const char *source;
	const char *mountpoint;
	const char *control;    /* Unix socket answering stats/reset, or NULL */
	const char *stats_file; /* JSON written at unmount, or NULL */
	double delay_ns[OP_COUNT];
	double jitter_ns;
	double attr_timeout, entry_timeout, negative_timeout;
	bool writeback;
	bool readdirplus;
	int max_threads; /* 0: see default_threads() */
	unsigned max_background;
} cfg = {
	.attr_timeout = 1.0,
	.entry_timeout = 1.0,
	.negative_timeout = 0.0,
	.writeback = true,
	.readdirplus = true,
	.max_background = 64,
};

/* ------------------------------------------------------------------------------------------ */
/* Counters                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Each thread counts into its own block: counting a request then writes memory no other thread
 * writes, with no lock and no cache line bouncing between cores. Readers add the blocks up.
 * A reset does not clear them (that would race with their owners): it keeps the sums as a
 * baseline to subtract, so that no request is lost between reading and resetting. Blocks live
 * as long as the process, since a final --stats may read them after the threads have gone. */
struct tally {
	_Atomic uint64_t ops[OP_COUNT];
	_Atomic uint64_t finished;   /* requests whose span ended */
	_Atomic uint64_t request_ns; /* their summed durations: the integral of inflight dt */
	_Atomic uint64_t held;       /* delayed replies queued, their thread free at once */
	_Atomic uint64_t slept;      /* delays a thread slept through (see hold_reply) */
	struct tally *next;
};

static _Atomic(struct tally *) tallies;
static __thread struct tally *my_tally;

static struct tally *tally(void)
{
	struct tally *t = my_tally;
	if (t)
		return t;
	/* A cache line of its own, or two threads' counters would share one after all. */
	t = aligned_alloc(64, (sizeof(*t) + 63) & ~(size_t)63);
	if (!t) {
		fprintf(stderr, "latencyfs: out of memory for a thread's counters\n");
		abort();
	}
	memset(t, 0, sizeof(*t));
	t->next = atomic_load(&tallies);
	while (!atomic_compare_exchange_weak(&tallies, &t->next, t))
		;
	return my_tally = t;
}

/* Only the owner writes a block: a plain load and store, no locked instruction. */
static void bump(_Atomic uint64_t *c, uint64_t by)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

/* In flight: one shared count, changed by a compare-and-swap while it stays above zero. Going
 * from idle to busy and back also starts and stops the busy clock, and the two must change
 * together: only those transitions (and readers) take the lock. */
static struct {
	_Atomic uint64_t now, peak;
	pthread_mutex_t lock;
	_Atomic uint64_t window_start_ns; /* last reset */
	uint64_t busy_since_ns;           /* when inflight last went 0 -> 1 */
	uint64_t busy_ns;                 /* time with at least one request in flight, closed intervals */
	struct { uint64_t ops[OP_COUNT], finished, request_ns, held, slept; } base; /* the sums at the last reset */
} flight = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t since_reset(uint64_t t)
{
	uint64_t w = atomic_load_explicit(&flight.window_start_ns, memory_order_relaxed);
	return t > w ? t : w;
}

static void flight_enter(uint64_t t)
{
	uint64_t n = atomic_load_explicit(&flight.now, memory_order_relaxed);
	while (n > 0 && !atomic_compare_exchange_weak(&flight.now, &n, n + 1))
		;
	if (n == 0) {
		pthread_mutex_lock(&flight.lock);
		if ((n = atomic_fetch_add(&flight.now, 1)) == 0)
			flight.busy_since_ns = t;
		pthread_mutex_unlock(&flight.lock);
	}
	uint64_t peak = atomic_load_explicit(&flight.peak, memory_order_relaxed);
	while (n + 1 > peak && !atomic_compare_exchange_weak(&flight.peak, &peak, n + 1))
		;
}

static void flight_leave(uint64_t t)
{
	uint64_t n = atomic_load_explicit(&flight.now, memory_order_relaxed);
	while (n > 1 && !atomic_compare_exchange_weak(&flight.now, &n, n - 1))
		;
	if (n <= 1) {
		pthread_mutex_lock(&flight.lock);
		uint64_t since = since_reset(flight.busy_since_ns);
		if (atomic_fetch_sub(&flight.now, 1) == 1 && t > since)
			flight.busy_ns += t - since;
		pthread_mutex_unlock(&flight.lock);
	}
}

/* Per-thread generator for the jitter: no shared state, no lock. */
static double uniform01(void)
{
	static __thread uint64_t s;
	if (s == 0)
		s = now_ns() ^ ((uint64_t)pthread_self() * 0x9E3779B97F4A7C15u) ^ 1;
	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return (double)(s >> 11) / (double)(1ull << 53);
}

/* When the request this thread is serving began, or 0, and the delay its reply is due to wait.
 * The span ends when its reply is written (see writev below), not when the handler returns: a
 * thread preempted between the two would otherwise still count as in flight while its client,
 * answered, sends the next request. */
static __thread uint64_t span_start, span_delay;

/* Requests in flight, held replies included, are at most --threads: a thread no longer serves
 * a delayed request to its end (see hold_reply), so the threads alone do not bound them. */
static sem_t slots;
static bool slots_bound;

static void span_begin(enum op op)
{
	bump(&tally()->ops[op], 1);
	if (slots_bound)
		while (sem_wait(&slots) != 0)
			;
	span_start = now_ns();
	flight_enter(span_start);

	double d = cfg.delay_ns[op];
	if (cfg.jitter_ns > 0)
		d += cfg.jitter_ns * uniform01();
	span_delay = d >= 1.0 ? (uint64_t)d : 0;
}

static void span_finish(uint64_t start, uint64_t end)
{
	struct tally *t = tally();
	/* A request that began before the last reset counts only from the reset on (a reset may
	 * even have come after `end` was read). */
	uint64_t from = since_reset(start);
	if (end > from)
		bump(&t->request_ns, end - from);
	bump(&t->finished, 1);
	flight_leave(end);
	if (slots_bound)
		sem_post(&slots);
}

static void span_end(void)
{
	if (!span_start)
		return;
	span_finish(span_start, now_ns());
	span_start = 0;
}

static struct timespec timespec_of(uint64_t ns)
{
	return (struct timespec){.tv_sec = ns / 1000000000u, .tv_nsec = ns % 1000000000u};
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = timespec_of(t);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* ------------------------------------------------------------------------------------------ */
/* Held replies                                                                                */
/* ------------------------------------------------------------------------------------------ */

/*
 * A request's work is done at once; its reply is what waits out the delay, copied into this
 * queue, from which one thread sends it when it is due. A thread sleeping through each delay
 * instead cost a sleep and a wake-up per request: 24-31 us of CPU a request at 1 ms against
 * 19-24 us this way (benchmarks/latencyfs_rate.py --delay 1), CPU taken from the tool being
 * measured on a machine where the two share the cores. The delay runs from the
 * end of the work, so a request still takes its delay plus its work, as before. Replies bigger
 * than HOLD_MAX (READ data) are not worth copying: their thread sleeps instead.
 */
#define HOLD_MAX (128u << 10)

struct held {
	uint64_t due, start;
	int fd;
	size_t len;
	char data[];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct held **heap; /* a binary heap, earliest due first */
	size_t n, cap;
	size_t peak;            /* most replies queued at once since the last reset */
	uint64_t waiting_until; /* when the sender will look again unless woken; 0: it is sending */
	bool stop;
	bool running;
	pthread_t thread;
} held = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void heap_swap(size_t a, size_t b)
{
	struct held *t = held.heap[a];
	held.heap[a] = held.heap[b];
	held.heap[b] = t;
}

static struct held *heap_pop(void)
{
	struct held *top = held.heap[0];
	held.heap[0] = held.heap[--held.n];
	for (size_t i = 0;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < held.n && held.heap[l]->due < held.heap[m]->due)
			m = l;
		if (r < held.n && held.heap[r]->due < held.heap[m]->due)
			m = r;
		if (m == i)
			break;
		heap_swap(i, m);
		i = m;
	}
	return top;
}

static bool grow_heap(void)
{
	size_t cap = held.cap ? 2 * held.cap : 1024;
	struct held **heap = realloc(held.heap, cap * sizeof(*heap));
	if (!heap)
		return false;
	held.heap = heap;
	held.cap = cap;
	return true;
}

/* Queues the reply of this thread's request, which ends its part in it; false if that cannot be
 * done (the sender is not running, or no memory), and the caller sends it itself. */
static bool hold_reply(int fd, const struct iovec *iov, int iovcnt, size_t len)
{
	struct held *h = malloc(sizeof(*h) + len);
	if (!h)
		return false;
	h->fd = fd;
	h->len = len;
	h->start = span_start;
	h->due = now_ns() + span_delay;
	for (size_t off = 0; iovcnt-- > 0; iov++) {
		memcpy(h->data + off, iov->iov_base, iov->iov_len);
		off += iov->iov_len;
	}
	pthread_mutex_lock(&held.lock);
	if (!held.running || (held.n == held.cap && !grow_heap())) {
		pthread_mutex_unlock(&held.lock);
		free(h);
		return false;
	}
	size_t i = held.n++;
	if (held.n > held.peak)
		held.peak = held.n;
	held.heap[i] = h;
	for (; i > 0 && held.heap[(i - 1) / 2]->due > h->due; i = (i - 1) / 2)
		heap_swap(i, (i - 1) / 2);
	/* With one delay for all, a new reply is due last and the sender need not hear of it. */
	if (h->due < held.waiting_until)
		pthread_cond_signal(&held.wake);
	/* Counted before the sender can send it: a client answered must find it counted. */
	bump(&tally()->held, 1);
	pthread_mutex_unlock(&held.lock);
	span_start = 0;
	return true;
}

static void send_held(struct held *h)
{
	span_finish(h->start, now_ns());
	/* ENOENT: the request was interrupted meanwhile, and the kernel forgot it (libfuse too
	 * ignores that); ENODEV: unmounted. */
	if (syscall(SYS_write, h->fd, h->data, h->len) < 0 && errno != ENOENT && errno != ENODEV)
		fprintf(stderr, "latencyfs: sending a reply: %s\n", strerror(errno));
	free(h);
}

static void *sender_loop(void *arg)
{
	(void)arg;
	struct held *due[64];
	pthread_mutex_lock(&held.lock);
	for (;;) {
		size_t k = 0;
		uint64_t now = now_ns();
		while (held.n && k < sizeof(due) / sizeof(*due) && (held.stop || held.heap[0]->due <= now))
			due[k++] = heap_pop();
		if (k) {
			held.waiting_until = 0;
			pthread_mutex_unlock(&held.lock);
			for (size_t i = 0; i < k; i++)
				send_held(due[i]);
			pthread_mutex_lock(&held.lock);
		} else if (held.stop) {
			break;
		} else if (held.n) {
			struct timespec ts = timespec_of(held.waiting_until = held.heap[0]->due);
			pthread_cond_timedwait(&held.wake, &held.lock, &ts);
		} else {
			held.waiting_until = UINT64_MAX;
			pthread_cond_wait(&held.wake, &held.lock);
		}
	}
	held.running = false;
	pthread_mutex_unlock(&held.lock);
	return NULL;
}

static int start_sender(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&held.wake, &a);
	pthread_condattr_destroy(&a);
	/* Signals (SIGINT/SIGTERM unmount) must reach the loop's threads, not this one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	held.running = true;
	int err = pthread_create(&held.thread, NULL, sender_loop, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		held.running = false;
		fprintf(stderr, "latencyfs: reply thread: %s\n", strerror(err));
		return -1;
	}
	return 0;
}

/* Sends what is still held at once, before the session's descriptor is closed. */
static void stop_sender(void)
{
	pthread_mutex_lock(&held.lock);
	bool running = held.running;
	held.stop = true;
	pthread_cond_signal(&held.wake);
	pthread_mutex_unlock(&held.lock);
	if (running)
		pthread_join(held.thread, NULL);
}

/* One JSON object with every counter; optionally resets them in the same critical section, so
 * that a snapshot-and-reset loses no request between the two. */
static char *stats_json(bool reset)
{
	uint64_t counts[OP_COUNT] = {0}, finished = 0, req_ns = 0, queued = 0, slept = 0;
	uint64_t now, window, busy, inflight, peak, held_now, held_peak;

	pthread_mutex_lock(&flight.lock);
	now = now_ns();
	for (struct tally *t = atomic_load(&tallies); t; t = t->next) {
		for (int i = 0; i < OP_COUNT; i++)
			counts[i] += atomic_load_explicit(&t->ops[i], memory_order_relaxed);
		finished += atomic_load_explicit(&t->finished, memory_order_relaxed);
		req_ns += atomic_load_explicit(&t->request_ns, memory_order_relaxed);
		queued += atomic_load_explicit(&t->held, memory_order_relaxed);
		slept += atomic_load_explicit(&t->slept, memory_order_relaxed);
	}
	for (int i = 0; i < OP_COUNT; i++) {
		uint64_t sum = counts[i];
		counts[i] -= flight.base.ops[i];
		if (reset)
			flight.base.ops[i] = sum;
	}
	finished -= flight.base.finished;
	req_ns -= flight.base.request_ns;
	queued -= flight.base.held;
	slept -= flight.base.slept;
	window = now - flight.window_start_ns;
	inflight = atomic_load(&flight.now);
	peak = atomic_load(&flight.peak);
	busy = flight.busy_ns + (inflight > 0 ? now - since_reset(flight.busy_since_ns) : 0);
	/* flight.lock, then held.lock: the one order the two are ever taken in together. */
	pthread_mutex_lock(&held.lock);
	held_now = held.n;
	held_peak = held.peak;
	if (reset)
		held.peak = held.n;
	pthread_mutex_unlock(&held.lock);
	if (reset) {
		flight.base.finished += finished;
		flight.base.request_ns += req_ns;
		flight.base.held += queued;
		flight.base.slept += slept;
		atomic_store(&flight.window_start_ns, now);
		flight.busy_ns = 0;
		flight.busy_since_ns = now;
		atomic_store(&flight.peak, inflight);
	}
	pthread_mutex_unlock(&flight.lock);

	uint64_t total = 0;
	for (int i = 0; i < OP_COUNT; i++)
		if (round_trip(i))
			total += counts[i];

	size_t cap = 4096;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	int n = snprintf(out, cap, "{\"ops\":{");
	for (int i = 0; i < OP_COUNT; i++)
		n += snprintf(out + n, cap - n, "%s\"%s\":%" PRIu64, i ? "," : "", op_names[i], counts[i]);
	n += snprintf(out + n, cap - n,
		      "},\"total\":%" PRIu64 ",\"finished\":%" PRIu64 ",\"inflight_now\":%" PRIu64
		      ",\"inflight_max\":%" PRIu64 ",\"inflight_avg\":%.4f,\"inflight_avg_busy\":%.4f"
		      ",\"window_s\":%.6f,\"busy_s\":%.6f,\"request_s\":%.6f"
		      ",\"held\":%" PRIu64 ",\"held_now\":%" PRIu64 ",\"held_max\":%" PRIu64 ",\"slept\":%" PRIu64 "}\n",
		      total, finished, inflight, peak, window ? (double)req_ns / (double)window : 0.0,
		      busy ? (double)req_ns / (double)busy : 0.0, window / 1e9, busy / 1e9, req_ns / 1e9,
		      queued, held_now, held_peak, slept);
	return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Inodes: a node per inode the kernel knows, keyed by (dev, ino); descriptors in a cache     */
/* ------------------------------------------------------------------------------------------ */

/*
 * A descriptor (O_PATH) for every inode the kernel knows would take as many open files as it
 * knows inodes: 102,000 for a tree of 100,000 files, past a hard limit that cannot be raised
 * without CAP_SYS_RESOURCE. So a node keeps its descriptor only while it is in the cache (at
 * most cache.cap of them, half the limit on open files: the rest is for the files the kernel
 * opens, which stay open until released), and once a sweep of the CLOCK kind has closed it to
 * make room, a file handle names the inode: open_by_handle_at() reopens it when a request needs
 * it (that takes CAP_DAC_READ_SEARCH). While the inodes in use fit, a request costs no call
 * more than it did with a descriptor each.
 *
 * The handle is taken when the node's descriptor is first closed, not when the node is made:
 * nodes that never leave the cache need none. Where no handle is to be had (the backing
 * filesystem has none, no CAP_DAC_READ_SEARCH, an inode on another mount under SOURCE) a node
 * keeps its descriptor for as long as the kernel knows it, as every node used to.
 *
 * A descriptor is closed only while no request uses it: a request counts itself in `users`
 * before it reads `fd` (hold), and the sweep takes `fd` away before it reads `users` (and puts
 * it back if someone came). Both sequentially consistent, so one of the two sees the other.
 * A node is freed by a forget, which may follow the reply to a request on it at once: handlers
 * let their nodes go before they reply.
 */
struct node {
	struct node *next; /* hash chain */
	ino_t ino;
	dev_t dev;
	_Atomic int fd;             /* or -1: closed to make room, reopen it by the handle */
	_Atomic unsigned users;     /* requests using fd: the sweep leaves it open */
	_Atomic bool recent;        /* used since the sweep last passed it */
	int slot;                   /* index in cache.nodes, or -1: fd kept for good, or closed (cache.lock) */
	struct file_handle *handle; /* set before fd is first taken away, and never changed */
	uint64_t nlookup;
	_Atomic bool ctime_flush_due; /* renamed, linked or unlinked: see c_setattr */
	_Atomic bool pinned;          /* losing its name: one use kept until that flush, see pin() */
};

#define BUCKETS (1u << 20)
static struct node **table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node root; /* its descriptor is always open; not in the cache */

/* The nodes whose descriptor is open and may be closed, in no order but the sweep's. */
static struct {
	pthread_mutex_t lock;
	struct node **nodes;
	size_t len, size;      /* nodes in it, room in the array */
	_Atomic size_t cap;    /* most descriptors to keep open: `most`, less what shed() gave up */
	size_t most;           /* half the limit on open files */
	size_t hand;           /* where the sweep goes on */
	int mount_fd;          /* for open_by_handle_at(), on SOURCE's mount; -1: no handles */
	int mount_id;          /* that mount's, as name_to_handle_at() gives it */
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER, .cap = 512, .most = 512, .mount_fd = -1};

static size_t bucket_of(ino_t ino, dev_t dev)
{
	uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15u ^ (uint64_t)dev;
	return (size_t)(h >> 44) & (BUCKETS - 1);
}

static struct node *node_of(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &root : (struct node *)(uintptr_t)ino;
}

static void proc_path(char out[64], int fd)
{
	snprintf(out, 64, "/proc/self/fd/%d", fd);
}

/* The handle of the inode open at fd, if open_by_handle_at() can use it, or NULL. */
static struct file_handle *handle_of(int fd)
{
	struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
	int mount_id = cache.mount_id;
	if (!h)
		return NULL;
	h->handle_bytes = MAX_HANDLE_SZ;
	/* On another mount (one under SOURCE), the handle would be decoded on the wrong one. */
	if (name_to_handle_at(fd, "", h, &mount_id, AT_EMPTY_PATH) < 0 || mount_id != cache.mount_id) {
		static atomic_flag told = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&told))
			fprintf(stderr, "latencyfs: an inode under %s has no file handle (%s): such inodes keep "
					"a descriptor each for as long as the kernel knows them\n", cfg.source,
				mount_id != cache.mount_id ? "it is on another mount" : strerror(errno));
		free(h);
		return NULL;
	}
	struct file_handle *fit = realloc(h, sizeof(*h) + h->handle_bytes);
	return fit ? fit : h;
}

static void cache_drop(struct node *n)
{
	struct node *last = cache.nodes[--cache.len];
	cache.nodes[n->slot] = last;
	last->slot = n->slot;
	n->slot = -1;
}

/* Take the descriptor away from a node in the cache that no request uses, the sweep sparing
 * once each one used since it last passed: the caller closes it. -1 if all are in use.
 * cache.lock held (so no other thread closes a descriptor of the cache meanwhile). */
static int evict_one(void)
{
	for (size_t steps = 0; cache.len > 0 && steps <= 2 * cache.len; steps++) {
		if (cache.hand >= cache.len)
			cache.hand = 0;
		struct node *n = cache.nodes[cache.hand];
		if (atomic_load_explicit(&n->recent, memory_order_relaxed)) {
			atomic_store_explicit(&n->recent, false, memory_order_relaxed);
			cache.hand++;
			continue;
		}
		if (!n->handle && !(n->handle = handle_of(atomic_load(&n->fd)))) {
			cache_drop(n); /* it keeps its descriptor */
			continue;
		}
		int fd = atomic_exchange(&n->fd, -1);
		if (atomic_load(&n->users) > 0) {
			atomic_store(&n->fd, fd);
			cache.hand++;
			continue;
		}
		cache_drop(n);
		return fd;
	}
	return -1;
}

/* n's descriptor joins the cache, which makes room for it: the descriptors to close go to out
 * (at most two, so that a cache grown past its size by nodes in use shrinks back), their number
 * is returned. cache.lock held. */
static int cache_add(struct node *n, int out[2])
{
	int closing = 0;
	while (cache.len >= cache.cap && closing < 2 && (out[closing] = evict_one()) >= 0)
		closing++;
	if (cache.len == cache.size) {
		size_t size = cache.size ? 2 * cache.size : 1024;
		struct node **nodes = realloc(cache.nodes, size * sizeof(*nodes));
		if (!nodes)
			return closing; /* then n keeps its descriptor */
		cache.nodes = nodes;
		cache.size = size;
	}
	n->slot = (int)cache.len;
	cache.nodes[cache.len++] = n;
	atomic_store_explicit(&n->recent, true, memory_order_relaxed);
	return closing;
}

/*
 * Out of descriptors (EMFILE): the files the kernel opened took more than the half of the
 * limit left to them. Closes some of the cache's, which then keeps that many fewer until files
 * are released (give_back), and says whether it did: with none to close the files open through
 * the mount hold them all. errno is left as it was.
 */
static bool shed(void)
{
	int err = errno, out[32], closing = 0;
	pthread_mutex_lock(&cache.lock);
	size_t want = cache.len / 8 + 1;
	while (closing < 32 && (size_t)closing < want && (out[closing] = evict_one()) >= 0)
		closing++;
	if (closing)
		atomic_store(&cache.cap, cache.len > 16 ? cache.len : 16);
	pthread_mutex_unlock(&cache.lock);
	for (int i = 0; i < closing; i++)
		close(out[i]);
	if (!closing) {
		static atomic_flag told = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&told))
			fprintf(stderr, "latencyfs: out of descriptors: %s; raise the hard limit on open files "
					"(ulimit -Hn)\n", cache.mount_fd < 0 ? "one per inode the kernel knows (no file handles)"
					: "files open through the mount and inodes in use take them all");
	}
	errno = err;
	return closing > 0;
}

/* A file the kernel had open is closed: its descriptor goes back to the cache, if shed() took
 * one from it. */
static void give_back(void)
{
	size_t cap = atomic_load_explicit(&cache.cap, memory_order_relaxed);
	while (cap < cache.most && !atomic_compare_exchange_weak(&cache.cap, &cap, cap + 1))
		;
}

/* A call that opens a descriptor, retried while a lack of them (EMFILE) can be made up for. */
#define MAKING_ROOM(call)                                                                      \
	({                                                                                      \
		int fd_;                                                                        \
		while ((fd_ = (call)) < 0 && errno == EMFILE && shed())                        \
			;                                                                       \
		fd_;                                                                            \
	})

/* A new descriptor for n, whose own was closed to make room; the caller is one of its users. */
static int reopen(struct node *n)
{
	int fd = MAKING_ROOM(open_by_handle_at(cache.mount_fd, n->handle, O_PATH));
	if (fd < 0)
		return -1;
	int out[2], closing = 0;
	pthread_mutex_lock(&cache.lock);
	int had = atomic_load(&n->fd); /* another request's reopen, or the sweep put it back */
	if (had < 0) {
		atomic_store(&n->fd, fd);
		closing = cache_add(n, out);
	}
	pthread_mutex_unlock(&cache.lock);
	if (had >= 0) {
		close(fd);
		fd = had;
	}
	for (int i = 0; i < closing; i++)
		close(out[i]);
	return fd;
}

/* A descriptor of ino's inode, open until let_go(ino), which follows every hold(ino); -1 and
 * errno if it could not be reopened (ESTALE: the inode is gone). In the cache: two atomic
 * operations, no call. */
static int hold(fuse_ino_t ino)
{
	struct node *n = node_of(ino);
	if (n == &root)
		return root.fd;
	atomic_fetch_add(&n->users, 1);
	int fd = atomic_load(&n->fd);
	if (fd < 0)
		return reopen(n);
	/* Only a store when it changes: no cache line written back and forth on every use. */
	if (!atomic_load_explicit(&n->recent, memory_order_relaxed))
		atomic_store_explicit(&n->recent, true, memory_order_relaxed);
	return fd;
}

static void let_go(fuse_ino_t ino)
{
	struct node *n = node_of(ino);
	if (n != &root)
		atomic_fetch_sub(&n->users, 1);
}

/*
 * A file about to lose a name (unlinked, or renamed over) keeps its descriptor open until the
 * kernel's ctime flush for it is served (c_setattr), or the kernel forgets it: with its last
 * name gone it could not be reopened by its handle (ESTALE), and the kernel keeps a failed flush
 * for the next syncfs() on the mount, where an NFS client sends no request that could fail.
 */
static bool pin(struct node *n)
{
	if (!n)
		return false;
	fuse_ino_t ino = (fuse_ino_t)(uintptr_t)n;
	if (hold(ino) >= 0 && !atomic_exchange(&n->pinned, true))
		return true;
	let_go(ino);
	return false;
}

static void unpin(struct node *n)
{
	if (n && n != &root && atomic_exchange(&n->pinned, false))
		let_go((fuse_ino_t)(uintptr_t)n);
}

/* The node of st's inode, or NULL; table_lock held. The root is found too: it is ".." of a
 * top-level directory, or a bind mount of the root into itself. */
static struct node *find_locked(const struct stat *st)
{
	if (st->st_ino == root.ino && st->st_dev == root.dev)
		return &root;
	struct node *n = table[bucket_of(st->st_ino, st->st_dev)];
	while (n && !(n->ino == st->st_ino && n->dev == st->st_dev))
		n = n->next;
	return n;
}

/* Whether n is still the inode open at fd, which has n's (dev, ino). A node without its
 * descriptor no longer keeps its inode alive: the inode may have been deleted, and its number
 * given to a new one (ext4 does that at once). Their handles differ, by the generation. */
static bool still_same(struct node *n, int fd)
{
	if (n == &root || atomic_load(&n->fd) >= 0)
		return true;
	struct file_handle *h = handle_of(fd);
	bool same = !h || (h->handle_type == n->handle->handle_type && h->handle_bytes == n->handle->handle_bytes &&
			   memcmp(h->f_handle, n->handle->f_handle, h->handle_bytes) == 0);
	free(h);
	return same;
}

/* One more kernel reference on st's inode. With fd >= 0 (an O_PATH descriptor of it) a node is
 * made if there is none, and fd is kept or closed; with fd < 0, NULL says there is none. */
static struct node *ref_node(const struct stat *st, int fd)
{
	struct node *made = NULL;
	pthread_mutex_lock(&table_lock);
	struct node *n = find_locked(st);
	if (n && fd >= 0 && !still_same(n, fd)) {
		/* Out of the table, so that lookups find the new inode; the kernel forgets it later. */
		struct node **pp = &table[bucket_of(n->ino, n->dev)];
		while (*pp != n)
			pp = &(*pp)->next;
		*pp = n->next;
		n = NULL;
	}
	if (n) {
		n->nlookup++;
	} else if (fd >= 0 && (n = made = calloc(1, sizeof(*n)))) {
		*n = (struct node){.ino = st->st_ino, .dev = st->st_dev, .fd = fd, .slot = -1, .nlookup = 1};
		size_t b = bucket_of(st->st_ino, st->st_dev);
		n->next = table[b];
		table[b] = n;
	}
	pthread_mutex_unlock(&table_lock);
	/* No other thread can forget it before the kernel has the reply. */
	if (made && cache.mount_fd >= 0) {
		int out[2], closing;
		pthread_mutex_lock(&cache.lock);
		closing = cache_add(made, out);
		pthread_mutex_unlock(&cache.lock);
		for (int i = 0; i < closing; i++)
			close(out[i]);
	} else if (!made && fd >= 0) {
		close(fd);
	}
	return n;
}

/* Look up `name` in the directory open at `dir`, take one kernel reference on the result and
 * fill `e`. Most lookups are of inodes the kernel has met before (its cache of the name
 * expired): then one fstatat() finds the node, and nothing is opened and closed again. After a
 * call that made the name (`fresh`) that probe is skipped: its inode is new to the table,
 * unless the call was a (rare) hard link, or its number was that of a deleted one. */
static int do_lookup(int dir, const char *name, struct fuse_entry_param *e, bool fresh)
{
	memset(e, 0, sizeof(*e));
	e->attr_timeout = cfg.attr_timeout;
	e->entry_timeout = cfg.entry_timeout;

	struct node *n = NULL;
	if (!fresh) {
		if (fstatat(dir, name, &e->attr, AT_SYMLINK_NOFOLLOW) < 0)
			return errno;
		n = ref_node(&e->attr, -1);
	}
	if (!n) {
		/* The attributes are those of what was opened: the name may have moved on since. */
		int fd = MAKING_ROOM(openat(dir, name, O_PATH | O_NOFOLLOW));
		if (fd < 0)
			return errno;
		if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
			int err = errno;
			close(fd);
			return err;
		}
		if (!(n = ref_node(&e->attr, fd)))
			return ENOMEM;
	}
	e->ino = n == &root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
	return 0;
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = node_of(ino);
	pthread_mutex_lock(&table_lock);
	if (n == &root || nlookup < n->nlookup) {
		n->nlookup -= nlookup < n->nlookup ? nlookup : n->nlookup;
		pthread_mutex_unlock(&table_lock);
		return;
	}
	struct node **pp = &table[bucket_of(n->ino, n->dev)];
	while (*pp && *pp != n)
		pp = &(*pp)->next;
	if (*pp)
		*pp = n->next;
	pthread_mutex_unlock(&table_lock);
	/* Out of the sweep's way before it is freed; no request uses it any more. */
	pthread_mutex_lock(&cache.lock);
	if (n->slot >= 0)
		cache_drop(n);
	pthread_mutex_unlock(&cache.lock);
	int fd = atomic_load(&n->fd);
	if (fd >= 0)
		close(fd);
	free(n->handle);
	free(n);
}

/* ------------------------------------------------------------------------------------------ */
/* Handlers. Each replies exactly once; the wrappers below time and count them.               */
/* ------------------------------------------------------------------------------------------ */

/* The one reply that names an inode: to a lookup (created false), or to a call that made the
 * name in `parent` (held, open at `dir`; let go here) and returned `res`. Only a lookup may
 * answer "no such name" with a negative entry the kernel caches: to a mkdir, say, an entry
 * without an inode would be a protocol error.
 *
 * Every handler lets its nodes go before it replies: once answered, the kernel may forget an
 * inode at once, and another thread free its node. */
static void reply_entry(fuse_req_t req, fuse_ino_t parent, int dir, const char *name, bool created, int res)
{
	struct fuse_entry_param e;
	int err = res < 0 ? errno : do_lookup(dir, name, &e, created);
	let_go(parent);
	if (err == ENOENT && !created && cfg.negative_timeout > 0) {
		/* ino 0: the kernel caches "no such entry" for entry_timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = cfg.negative_timeout;
		err = 0;
	}
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_entry(req, &e);
}

static void h_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int dir = hold(parent);
	reply_entry(req, parent, dir, name, false, dir < 0 ? -1 : 0);
}

static void h_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(ino, nlookup);
	fuse_reply_none(req);
}

static void h_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		forget_one(forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void h_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int res;
	if (fi) {
		res = fstat((int)fi->fh, &st);
	} else {
		int fd = hold(ino);
		res = fd < 0 ? -1 : fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
		let_go(ino);
	}
	if (res < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_attr(req, &st, cfg.attr_timeout);
}

/* `flush`: the kernel's ctime flush, which also ends the file's pin (see pin()), once the
 * attributes are read and before the reply (after it the kernel may forget the node). */
static void h_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		      struct fuse_file_info *fi, bool flush)
{
	int fd = hold(ino);
	int res = fd < 0 ? -1 : 0;
	char path[64] = "";
	if (fd >= 0)
		proc_path(path, fd);

	if (res == 0 && (valid & FUSE_SET_ATTR_MODE))
		res = fi ? fchmod((int)fi->fh, attr->st_mode) : chmod(path, attr->st_mode);
	if (res == 0 && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
		uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
		res = fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	}
	if (res == 0 && (valid & FUSE_SET_ATTR_SIZE))
		res = fi ? ftruncate((int)fi->fh, attr->st_size) : truncate(path, attr->st_size);
	if (res == 0 && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
		struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_OMIT}};
		if (valid & FUSE_SET_ATTR_ATIME_NOW)
			tv[0].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_ATIME)
			tv[0] = attr->st_atim;
		if (valid & FUSE_SET_ATTR_MTIME_NOW)
			tv[1].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_MTIME)
			tv[1] = attr->st_mtim;
		res = fi ? futimens((int)fi->fh, tv)
			 : utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	}
	struct stat st;
	if (res == 0)
		res = fi ? fstat((int)fi->fh, &st) : fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	int err = errno;
	let_go(ino);
	if (flush)
		unpin(node_of(ino));
	if (res < 0)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, cfg.attr_timeout);
}

static void h_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[PATH_MAX + 1];
	int fd = hold(ino);
	ssize_t res = fd < 0 ? -1 : readlinkat(fd, "", buf, sizeof(buf));
	let_go(ino);
	if (res < 0)
		fuse_reply_err(req, errno);
	else if (res == sizeof(buf))
		fuse_reply_err(req, ENAMETOOLONG);
	else {
		buf[res] = 0;
		fuse_reply_readlink(req, buf);
	}
}

static void h_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	int dir = hold(parent);
	reply_entry(req, parent, dir, name, true, dir < 0 ? -1 : mknodat(dir, name, mode, rdev));
}

static void h_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	int dir = hold(parent);
	reply_entry(req, parent, dir, name, true, dir < 0 ? -1 : mkdirat(dir, name, mode));
}

static void h_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	int dir = hold(parent);
	reply_entry(req, parent, dir, name, true, dir < 0 ? -1 : symlinkat(link, dir, name));
}

/* The node of the regular file `name` in the directory open at `dir`, if the kernel knows its
 * inode and keeps its times (the writeback cache, regular files only): the file whose rename,
 * link or unlink the kernel's own ctime flush follows (c_setattr). */
static struct node *known_file(int dir, const char *name)
{
	struct stat st;
	if (!cfg.writeback || fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return NULL;
	pthread_mutex_lock(&table_lock);
	struct node *n = find_locked(&st);
	pthread_mutex_unlock(&table_lock);
	return n;
}

static void expect_ctime_flush(struct node *n)
{
	if (n)
		atomic_store(&n->ctime_flush_due, true);
}

static void h_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	int fd = hold(ino);
	if (fd < 0) {
		let_go(ino);
		fuse_reply_err(req, errno);
		return;
	}
	int dir = hold(newparent);
	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link works for anyone. */
	int res = dir < 0 ? -1 : linkat(fd, "", dir, newname, AT_EMPTY_PATH);
	if (res < 0 && dir >= 0 && (errno == ENOENT || errno == EPERM)) {
		char path[64];
		proc_path(path, fd);
		res = linkat(AT_FDCWD, path, dir, newname, AT_SYMLINK_FOLLOW);
	}
	let_go(ino);
	if (res == 0)
		expect_ctime_flush(known_file(dir, newname));
	reply_entry(req, newparent, dir, newname, true, res);
}

static void h_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int dir = hold(parent);
	struct node *n = dir < 0 ? NULL : known_file(dir, name);
	/* A pin taken earlier (a flush still due) is not this call's to drop if it fails. */
	bool pinned = pin(n);
	int res = dir < 0 ? -1 : unlinkat(dir, name, 0);
	if (res == 0)
		expect_ctime_flush(n);
	else if (pinned)
		unpin(n);
	let_go(parent);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void h_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int dir = hold(parent);
	int res = dir < 0 ? -1 : unlinkat(dir, name, AT_REMOVEDIR);
	let_go(parent);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void h_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		     const char *newname, unsigned int flags)
{
	int dir = hold(parent), newdir = dir < 0 ? -1 : hold(newparent), res = -1;
	if (newdir >= 0) {
		/* A file renamed over goes as an unlink does, with its own flush. */
		struct node *replaced = flags & RENAME_EXCHANGE ? NULL : known_file(newdir, newname);
		bool pinned = pin(replaced);
		res = renameat2(dir, name, newdir, newname, flags);
		if (res == 0) {
			expect_ctime_flush(known_file(newdir, newname));
			expect_ctime_flush(flags & RENAME_EXCHANGE ? known_file(dir, name) : replaced);
		} else if (pinned) {
			unpin(replaced);
		}
	}
	if (dir >= 0)
		let_go(newparent);
	let_go(parent);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

/* With the writeback cache the kernel may read pages of a file opened write-only, and it
 * appends by itself. */
static int open_flags(int flags)
{
	if (cfg.writeback) {
		if ((flags & O_ACCMODE) == O_WRONLY)
			flags = (flags & ~O_ACCMODE) | O_RDWR;
		flags &= ~O_APPEND;
	}
	return flags & ~O_NOFOLLOW;
}

static void h_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	char path[64];
	int at = hold(ino), fd = -1;
	if (at >= 0) {
		proc_path(path, at);
		fd = MAKING_ROOM(open(path, open_flags(fi->flags)));
	}
	let_go(ino);
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	fi->fh = (uint64_t)fd;
	/* NFS keeps cached pages across opens unless the attributes show a change (close-to-open
	 * consistency); auto_inval_data does the same check here. */
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void h_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     struct fuse_file_info *fi)
{
	int dir = hold(parent);
	int fd = dir < 0 ? -1 : MAKING_ROOM(openat(dir, name, open_flags(fi->flags) | O_CREAT, mode));
	if (fd < 0) {
		let_go(parent);
		fuse_reply_err(req, errno);
		return;
	}
	struct fuse_entry_param e;
	int err = do_lookup(dir, name, &e, true);
	let_go(parent);
	if (err) {
		close(fd);
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)fd;
	fi->keep_cache = 1;
	fuse_reply_create(req, &e, fi);
}

static void h_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void h_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
			struct fuse_file_info *fi)
{
	(void)ino;
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = (int)fi->fh;
	out.buf[0].pos = off;
	ssize_t res = fuse_buf_copy(&out, in, 0);
	if (res < 0)
		fuse_reply_err(req, (int)-res);
	else
		fuse_reply_write(req, (size_t)res);
}

static void h_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	/* close() of a duplicate reports deferred write errors, as close() of the original would. */
	int fd = MAKING_ROOM(dup((int)fi->fh));
	int res = fd < 0 ? -1 : close(fd);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void h_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	close((int)fi->fh);
	give_back();
	fuse_reply_err(req, 0);
}

static void h_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	int res = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void h_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			struct fuse_file_info *fi)
{
	(void)ino;
	int res = fallocate((int)fi->fh, mode, off, len);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

static void h_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	(void)ino;
	off_t res = lseek((int)fi->fh, off, whence);
	if (res < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, res);
}

static void h_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs st;
	int fd = hold(ino);
	int res = fd < 0 ? -1 : fstatvfs(fd, &st);
	let_go(ino);
	if (res < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &st);
}

/* --- directories --- */

struct dir {
	DIR *dp;
	off_t offset;          /* position of the next entry readdir() will return */
	struct dirent *pending; /* read but not yet sent (the last reply was full) */
};

static struct dir *dir_of(struct fuse_file_info *fi)
{
	return (struct dir *)(uintptr_t)fi->fh;
}

static void h_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dir *d = calloc(1, sizeof(*d));
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int at = hold(ino);
	int fd = at < 0 ? -1 : MAKING_ROOM(openat(at, ".", O_RDONLY | O_DIRECTORY));
	let_go(ino);
	if (fd < 0 || !(d->dp = fdopendir(fd))) {
		int err = errno;
		if (fd >= 0)
			close(fd);
		free(d);
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	/* Directory pages cached until the directory's attributes show it changed, as NFS does. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static bool is_dot(const char *name)
{
	return name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0));
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct dir *d = dir_of(fi);
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (off != d->offset) {
		seekdir(d->dp, off);
		d->pending = NULL;
		d->offset = off;
	}
	size_t used = 0;
	int err = 0;
	for (;;) {
		if (!d->pending) {
			errno = 0;
			d->pending = readdir(d->dp);
			if (!d->pending) {
				err = errno;
				break;
			}
		}
		struct dirent *de = d->pending;
		off_t next = de->d_off;
		size_t len;
		if (plus) {
			struct fuse_entry_param e = {0};
			bool looked_up = false;
			if (is_dot(de->d_name)) {
				e.attr.st_ino = de->d_ino;
				e.attr.st_mode = (mode_t)de->d_type << 12;
			} else {
				/* In the directory open for reading: whether or not its node has a descriptor. */
				err = do_lookup(dirfd(d->dp), de->d_name, &e, false);
				if (err == ENOENT) { /* gone since readdir() saw it */
					err = 0;
					d->pending = NULL;
					d->offset = next;
					continue;
				}
				if (err)
					break;
				looked_up = true;
			}
			len = fuse_add_direntry_plus(req, buf + used, size - used, de->d_name, &e, next);
			if (len > size - used) {
				if (looked_up) /* not sent: the kernel never took this reference */
					forget_one(e.ino, 1);
				break;
			}
		} else {
			struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)de->d_type << 12};
			len = fuse_add_direntry(req, buf + used, size - used, de->d_name, &st, next);
			if (len > size - used)
				break;
		}
		used += len;
		d->pending = NULL;
		d->offset = next;
	}
	/* An error after some entries: send those, the error comes back on the next call. */
	if (err && used == 0)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void h_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void h_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void h_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct dir *d = dir_of(fi);
	closedir(d->dp);
	free(d);
	give_back();
	fuse_reply_err(req, 0);
}

static void h_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	int fd = dirfd(dir_of(fi)->dp);
	int res = datasync ? fdatasync(fd) : fsync(fd);
	fuse_reply_err(req, res < 0 ? errno : 0);
}

/*
 * Parallel directory operations. Without FUSE_PARALLEL_DIROPS in the INIT reply the kernel
 * holds a directory's lock across every lookup and readdir request in it, so all lookups in one
 * directory are served one at a time, whatever the number of threads: a millisecond of delay
 * would cap a flat directory at 1,000 lookups/s. libfuse before 3.16 never sends the flag, even
 * when asked to (libfuse pull request #861); Debian 12 ships 3.14. So this program defines
 * writev(), which libfuse's calls resolve to ahead of libc's, and sets the flag in the one INIT
 * reply, the first write after init() returns. On a libfuse that sends it, this changes nothing.
 * The same hook holds a delayed request's reply back (see hold_reply), or ends its span as it goes out.
 */
static _Atomic bool init_reply_pending;

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	/* libfuse writes every reply with writev, from the thread that served the request (h_init
	 * turns splicing replies off). */
	if (span_start && span_delay) {
		size_t len = 0;
		for (int i = 0; i < iovcnt; i++)
			len += iov[i].iov_len;
		if (len <= HOLD_MAX && hold_reply(fd, iov, iovcnt, len))
			return (ssize_t)len;
		bump(&tally()->slept, 1);
		sleep_until(now_ns() + span_delay);
	}
	span_end();
	struct iovec copy[2];
	char patched[sizeof(struct fuse_init_out)];
	if (atomic_load_explicit(&init_reply_pending, memory_order_relaxed) &&
	    atomic_exchange(&init_reply_pending, false) && iovcnt == 2 &&
	    iov[0].iov_len == sizeof(struct fuse_out_header) &&
	    ((const struct fuse_out_header *)iov[0].iov_base)->error == 0 &&
	    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
		size_t len = iov[1].iov_len < sizeof(patched) ? iov[1].iov_len : sizeof(patched);
		memcpy(patched, iov[1].iov_base, len);
		((struct fuse_init_out *)patched)->flags |= FUSE_PARALLEL_DIROPS;
		copy[0] = iov[0];
		copy[1] = (struct iovec){.iov_base = patched, .iov_len = len};
		iov = copy;
	}
	return syscall(SYS_writev, fd, iov, iovcnt);
}

static void h_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (cfg.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	if (!cfg.readdirplus)
		conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* NFS moves up to 1 MiB per READ/WRITE (rsize/wsize); let FUSE do the same. */
	conn->max_write = 1u << 20;
	conn->max_readahead = 1u << 20;
	conn->max_background = cfg.max_background;
	conn->congestion_threshold = cfg.max_background * 3 / 4;
	/* Receiving by splice() costs a small request two calls (splice into a pipe, read out of
	 * it) instead of one read(), and most requests are small. Nor does it work for 1 MiB
	 * writes without CAP_SYS_RESOURCE: the pipe must hold max_write plus a header, more than
	 * fs.pipe-max-size (1 MiB), so libfuse made a pipe per thread and fell back to read(). */
	conn->want &= ~FUSE_CAP_SPLICE_READ;
	/* A reply spliced from a file would bypass writev, and with it its delay. */
	conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	atomic_store(&init_reply_pending, true);
}

/* ------------------------------------------------------------------------------------------ */
/* Counting wrappers                                                                           */
/* ------------------------------------------------------------------------------------------ */

#define COUNTED(kind, handler, params, args)                                                   \
	static void c_##handler params                                                          \
	{                                                                                       \
		span_begin(OP_##kind);                                                          \
		h_##handler args;                                                               \
		span_end(); /* if no reply was written */                                       \
	}

COUNTED(LOOKUP, lookup, (fuse_req_t r, fuse_ino_t p, const char *n), (r, p, n))
COUNTED(GETATTR, getattr, (fuse_req_t r, fuse_ino_t i, struct fuse_file_info *f), (r, i, f))
COUNTED(READLINK, readlink, (fuse_req_t r, fuse_ino_t i), (r, i))
COUNTED(MKNOD, mknod, (fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, dev_t d), (r, p, n, m, d))
COUNTED(MKDIR, mkdir, (fuse_req_t r, fuse_ino_t p, const char *n, mode_t m), (r, p, n, m))
COUNTED(UNLINK, unlink, (fuse_req_t r, fuse_ino_t p, const char *n), (r, p, n))
COUNTED(RMDIR, rmdir, (fuse_req_t r, fuse_ino_t p, const char *n), (r, p, n))
COUNTED(SYMLINK, symlink, (fuse_req_t r, const char *l, fuse_ino_t p, const char *n), (r, l, p, n))
COUNTED(RENAME, rename,
	(fuse_req_t r, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn, unsigned int f),
	(r, p, n, np, nn, f))
COUNTED(LINK, link, (fuse_req_t r, fuse_ino_t i, fuse_ino_t np, const char *nn), (r, i, np, nn))
COUNTED(OPEN, open, (fuse_req_t r, fuse_ino_t i, struct fuse_file_info *f), (r, i, f))
COUNTED(READ, read, (fuse_req_t r, fuse_ino_t i, size_t s, off_t o, struct fuse_file_info *f),
	(r, i, s, o, f))
COUNTED(WRITE, write_buf, (fuse_req_t r, fuse_ino_t i, struct fuse_bufvec *b, off_t o, struct fuse_file_info *f),
	(r, i, b, o, f))
COUNTED(FLUSH, flush, (fuse_req_t r, fuse_ino_t i, struct fuse_file_info *f), (r, i, f))
COUNTED(RELEASE, release, (fuse_req_t r, fuse_ino_t i, struct fuse_file_info *f), (r, i, f))
COUNTED(FSYNC, fsync, (fuse_req_t r, fuse_ino_t i, int d, struct fuse_file_info *f), (r, i, d, f))
COUNTED(OPENDIR, opendir, (fuse_req_t r, fuse_ino_t i, struct fuse_file_info *f), (r, i, f))
COUNTED(READDIR, readdir, (fuse_req_t r, fuse_ino_t i, size_t s, off_t o, struct fuse_file_info *f),
	(r, i, s, o, f))
COUNTED(READDIRPLUS, readdirplus,
	(fuse_req_t r, fuse_ino_t i, size_t s, off_t o, struct fuse_file_info *f), (r, i, s, o, f))
COUNTED(RELEASEDIR, releasedir, (fuse_req_t r, fuse_ino_t i, struct fuse_file_info *f), (r, i, f))
COUNTED(FSYNCDIR, fsyncdir, (fuse_req_t r, fuse_ino_t i, int d, struct fuse_file_info *f), (r, i, d, f))
COUNTED(STATFS, statfs, (fuse_req_t r, fuse_ino_t i), (r, i))
COUNTED(CREATE, create, (fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, struct fuse_file_info *f),
	(r, p, n, m, f))
COUNTED(FALLOCATE, fallocate,
	(fuse_req_t r, fuse_ino_t i, int m, off_t o, off_t l, struct fuse_file_info *f), (r, i, m, o, l, f))
COUNTED(LSEEK, lseek, (fuse_req_t r, fuse_ino_t i, off_t o, int w, struct fuse_file_info *f),
	(r, i, o, w, f))

/*
 * With the writeback cache the kernel keeps a file's ctime itself, and after a rename, link or
 * unlink it writes the new ctime back at once, in a SETATTR of mtime and ctime only, before the
 * call returns (fuse_update_ctime, then fuse_flush_time_update): under the directory's lock, for
 * a rename. An NFS client sends nothing then (the server sets ctime), so that SETATTR is counted
 * apart, as `ctime_flush`, and answered without delay. It is told from a tool's own utimensat()
 * by what comes before it: the inode was just renamed, linked or unlinked.
 */
static void c_setattr(fuse_req_t r, fuse_ino_t i, struct stat *a, int v, struct fuse_file_info *f)
{
	const int times = FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME;
	bool flush = (v & ~times) == 0 && (v & FUSE_SET_ATTR_CTIME) && atomic_exchange(&node_of(i)->ctime_flush_due, false);
	if (flush)
		bump(&tally()->ops[OP_CTIME_FLUSH], 1);
	else
		span_begin(OP_SETATTR);
	h_setattr(r, i, a, v, f, flush);
	span_end(); /* if no reply was written; nothing without a span */
}

/* A forget is a one-way message with no reply: counted, never delayed (NFS has no such call). */
static void c_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	bump(&tally()->ops[OP_FORGET], 1);
	h_forget(req, ino, nlookup);
}

static void c_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	bump(&tally()->ops[OP_FORGET], count);
	h_forget_multi(req, count, forgets);
}

/* No xattr handlers: the kernel gets ENOSYS once and stops asking, as on Azure Files NFS
 * (NFSv4.1, no extended attributes). No tmpfile either: O_TMPFILE fails as on NFS. */
static const struct fuse_lowlevel_ops ops = {
	.init = h_init,
	.lookup = c_lookup,
	.forget = c_forget,
	.forget_multi = c_forget_multi,
	.getattr = c_getattr,
	.setattr = c_setattr,
	.readlink = c_readlink,
	.mknod = c_mknod,
	.mkdir = c_mkdir,
	.unlink = c_unlink,
	.rmdir = c_rmdir,
	.symlink = c_symlink,
	.rename = c_rename,
	.link = c_link,
	.open = c_open,
	.read = c_read,
	.write_buf = c_write_buf,
	.flush = c_flush,
	.release = c_release,
	.fsync = c_fsync,
	.opendir = c_opendir,
	.readdir = c_readdir,
	.readdirplus = c_readdirplus,
	.releasedir = c_releasedir,
	.fsyncdir = c_fsyncdir,
	.statfs = c_statfs,
	.create = c_create,
	.fallocate = c_fallocate,
	.lseek = c_lseek,
};

/* ------------------------------------------------------------------------------------------ */
/* Control socket: one line in ("stats", "reset" or "snapshot"), one JSON line out             */
/* ------------------------------------------------------------------------------------------ */

static int control_fd = -1;

static void *control_loop(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(control_fd, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		char line[64];
		ssize_t n = read(c, line, sizeof(line) - 1);
		line[n > 0 ? n : 0] = 0;
		line[strcspn(line, "\r\n")] = 0;
		char *out = NULL;
		if (strcmp(line, "stats") == 0)
			out = stats_json(false);
		else if (strcmp(line, "snapshot") == 0)
			out = stats_json(true);
		else if (strcmp(line, "reset") == 0) {
			free(stats_json(true));
			out = strdup("{\"reset\":true}\n");
		} else
			out = strdup("{\"error\":\"unknown command; use stats, reset or snapshot\"}\n");
		if (out) {
			for (size_t off = 0, len = strlen(out); off < len;) {
				ssize_t w = send(c, out + off, len - off, MSG_NOSIGNAL);
				if (w <= 0)
					break;
				off += (size_t)w;
			}
			free(out);
		}
		close(c);
	}
}

static int start_control(void)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(cfg.control) >= sizeof(addr.sun_path)) {
		fprintf(stderr, "latencyfs: control socket path too long: %s\n", cfg.control);
		return -1;
	}
	strcpy(addr.sun_path, cfg.control);
	unlink(cfg.control);
	control_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (control_fd < 0 || bind(control_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(control_fd, 16) < 0) {
		fprintf(stderr, "latencyfs: control socket %s: %s\n", cfg.control, strerror(errno));
		return -1;
	}
	/* Signals (SIGINT/SIGTERM unmount) must reach the loop's thread, not this one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_t t;
	int err = pthread_create(&t, NULL, control_loop, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		fprintf(stderr, "latencyfs: control thread: %s\n", strerror(err));
		return -1;
	}
	pthread_detach(t);
	return 0;
}

static int ctl_main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: latencyfs ctl SOCKET stats|reset|snapshot\n");
		return 2;
	}
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(argv[2]) >= sizeof(addr.sun_path)) {
		fprintf(stderr, "latencyfs ctl: socket path too long\n");
		return 2;
	}
	strcpy(addr.sun_path, argv[2]);
	int c = socket(AF_UNIX, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		fprintf(stderr, "latencyfs ctl: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	dprintf(c, "%s\n", argv[3]);
	shutdown(c, SHUT_WR);
	char buf[4096];
	ssize_t n;
	while ((n = read(c, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stdout);
	close(c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Command line                                                                                */
/* ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: latencyfs [options] SOURCE MOUNTPOINT\n"
		"       latencyfs ctl SOCKET stats|reset|snapshot\n"
		"\n"
		"Mirror SOURCE at MOUNTPOINT, delaying and counting every request. Runs in the\n"
		"foreground until unmounted (fusermount3 -u MOUNTPOINT) or sent SIGINT/SIGTERM.\n"
		"\n"
		"  --delay MS              delay of every request (default 0)\n"
		"  --delay-op KIND=MS,...  delay of some kinds only, e.g. lookup=2,getattr=1\n"
		"  --jitter MS             add a uniform random 0..MS to every delay\n"
		"  --attr-timeout S        how long the kernel trusts attributes (default 1; actimeo)\n"
		"  --entry-timeout S       how long the kernel trusts a name lookup (default 1)\n"
		"  --negative-timeout S    how long it trusts \"no such name\" (default 0: lookupcache=positive)\n"
		"  --no-writeback-cache    every write() becomes a request\n"
		"  --no-readdirplus        plain readdir, a lookup per entry\n"
		"  --threads N             most requests in flight at once (default: 256 with a delay or\n"
		"                          jitter, else the number of CPUs, at least 2)\n"
		"  --max-background N      kernel's limit on async requests, readahead/writeback (default 64)\n"
		"  --control SOCKET        answer \"stats\", \"reset\", \"snapshot\" (stats, then reset) there\n"
		"  --stats FILE            write the final counters there as JSON when unmounted\n"
		"  -o OPT[,OPT...]         extra FUSE mount options\n"
		"\n"
		"Request kinds:");
	for (int i = 0; i < OP_COUNT; i++)
		fprintf(f, " %s", op_names[i]);
	fprintf(f, "\n");
}

static bool parse_ms(const char *s, double *ns)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || v < 0 || v > 600000)
		return false;
	*ns = v * 1e6;
	return true;
}

static bool parse_seconds(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || v < 0)
		return false;
	*out = v;
	return true;
}

static bool parse_delay_ops(char *spec)
{
	for (char *save = NULL, *item = strtok_r(spec, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		if (!eq)
			return false;
		*eq = 0;
		int i = 0;
		while (i < OP_COUNT && strcmp(op_names[i], item) != 0)
			i++;
		if (i == OP_COUNT || !round_trip(i) || !parse_ms(eq + 1, &cfg.delay_ns[i])) {
			fprintf(stderr, "latencyfs: bad --delay-op entry %s=%s\n", item, eq + 1);
			return false;
		}
	}
	return true;
}

/*
 * With a delay, --threads bounds the requests in flight (held replies included) and the threads
 * libfuse may start: it starts one only when none is idle, and a thread sleeps through a delay
 * only for a reply too big to hold. Without a delay a request takes microseconds, and every
 * thread beyond the CPUs costs instead: each idle thread waits in read() on /dev/fuse, and the
 * kernel wakes one of them for every request it queues (a context switch) even when a busy
 * thread would have taken it next without sleeping. So a thread per CPU serves more requests a
 * second (measured by benchmarks/latencyfs_rate.py); two at least, so that one slow call (an
 * fsync) does not stop the rest. The price: at zero delay no more than that many requests count
 * as in flight.
 */
static bool delayed(void)
{
	bool any = cfg.jitter_ns > 0;
	for (int i = 0; i < OP_COUNT; i++)
		any |= cfg.delay_ns[i] > 0;
	return any;
}

static int default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return delayed() ? 256 : cpus > 2 ? (int)cpus : 2;
}

/* The files a tool has open through the mount are open here too, and the cache of inodes'
 * descriptors takes half of the limit (without file handles, a descriptor for every inode the
 * kernel knows): the usual soft limit (1,024) would make a small cache, and inodes reopened by
 * handle over and over. Raised as far as allowed: to the hard limit, and past it up to
 * fs.nr_open with CAP_SYS_RESOURCE. */
static void raise_open_files_limit(void)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) != 0)
		return;
	rlim_t want = r.rlim_max;
	FILE *f = fopen("/proc/sys/fs/nr_open", "r");
	unsigned long nr_open;
	if (f) {
		if (fscanf(f, "%lu", &nr_open) == 1 && (want == RLIM_INFINITY || nr_open > want))
			want = nr_open;
		fclose(f);
	}
	struct rlimit up = { want, want > r.rlim_max ? want : r.rlim_max };
	if (setrlimit(RLIMIT_NOFILE, &up) != 0 && r.rlim_cur < r.rlim_max) {
		up.rlim_cur = up.rlim_max = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &up);
	}
	if (getrlimit(RLIMIT_NOFILE, &r) == 0)
		cache.cap = cache.most = r.rlim_cur / 2 > 16 ? (size_t)(r.rlim_cur / 2) : 16;
}

/* Whether inodes can be reopened by handle here: the backing filesystem must give handles, and
 * open_by_handle_at() takes CAP_DAC_READ_SEARCH (and a descriptor that is not O_PATH). If not,
 * every node keeps its descriptor, as many open files as inodes the kernel knows. */
static void setup_handles(void)
{
	struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
	int fd = open(cfg.source, O_RDONLY | O_DIRECTORY), probe = -1;
	if (h && fd >= 0) {
		h->handle_bytes = MAX_HANDLE_SZ;
		if (name_to_handle_at(fd, "", h, &cache.mount_id, AT_EMPTY_PATH) == 0)
			probe = open_by_handle_at(fd, h, O_PATH);
	}
	if (probe < 0) {
		fprintf(stderr, "latencyfs: %s: no file handles (%s): one descriptor for every inode the "
				"kernel knows, as many open files as that\n", cfg.source, strerror(h ? errno : ENOMEM));
		if (fd >= 0)
			close(fd);
	} else {
		close(probe);
		cache.mount_fd = fd;
	}
	free(h);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "ctl") == 0)
		return ctl_main(argc, argv);

	enum { O_DELAY = 256, O_DELAY_OP, O_JITTER, O_ATTR, O_ENTRY, O_NEG, O_NOWB, O_NORDP,
	       O_THREADS, O_MAXBG, O_CONTROL, O_STATS };
	static const struct option longopts[] = {
		{"delay", required_argument, NULL, O_DELAY},
		{"delay-op", required_argument, NULL, O_DELAY_OP},
		{"jitter", required_argument, NULL, O_JITTER},
		{"attr-timeout", required_argument, NULL, O_ATTR},
		{"entry-timeout", required_argument, NULL, O_ENTRY},
		{"negative-timeout", required_argument, NULL, O_NEG},
		{"no-writeback-cache", no_argument, NULL, O_NOWB},
		{"no-readdirplus", no_argument, NULL, O_NORDP},
		{"threads", required_argument, NULL, O_THREADS},
		{"max-background", required_argument, NULL, O_MAXBG},
		{"control", required_argument, NULL, O_CONTROL},
		{"stats", required_argument, NULL, O_STATS},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	char extra_opts[1024] = "";
	double global = 0;
	char *delay_ops = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
		bool ok = true;
		switch (c) {
		case O_DELAY: ok = parse_ms(optarg, &global); break;
		case O_DELAY_OP: delay_ops = optarg; break;
		case O_JITTER: ok = parse_ms(optarg, &cfg.jitter_ns); break;
		case O_ATTR: ok = parse_seconds(optarg, &cfg.attr_timeout); break;
		case O_ENTRY: ok = parse_seconds(optarg, &cfg.entry_timeout); break;
		case O_NEG: ok = parse_seconds(optarg, &cfg.negative_timeout); break;
		case O_NOWB: cfg.writeback = false; break;
		case O_NORDP: cfg.readdirplus = false; break;
		case O_THREADS: cfg.max_threads = atoi(optarg); ok = cfg.max_threads > 0; break;
		case O_MAXBG: cfg.max_background = (unsigned)atoi(optarg); ok = cfg.max_background > 0; break;
		case O_CONTROL: cfg.control = optarg; break;
		case O_STATS: cfg.stats_file = optarg; break;
		case 'o':
			ok = strlen(extra_opts) + strlen(optarg) + 2 < sizeof(extra_opts);
			if (ok) {
				strcat(extra_opts, ",");
				strcat(extra_opts, optarg);
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (!ok) {
			fprintf(stderr, "latencyfs: bad value for --%s: %s\n",
				c == 'o' ? "o" : longopts[c - O_DELAY].name, optarg);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	for (int i = 0; i < OP_COUNT; i++)
		cfg.delay_ns[i] = round_trip(i) ? global : 0;
	if (delay_ops && !parse_delay_ops(delay_ops))
		return 2;
	if (!cfg.max_threads)
		cfg.max_threads = default_threads();
	cfg.source = argv[optind];
	cfg.mountpoint = argv[optind + 1];

	/* The kernel already applied the caller's umask to every mode it sends. */
	umask(0);
	raise_open_files_limit();
	root.fd = open(cfg.source, O_PATH | O_DIRECTORY);
	struct stat st;
	if (root.fd < 0 || fstat(root.fd, &st) < 0) {
		fprintf(stderr, "latencyfs: %s: %s\n", cfg.source, strerror(errno));
		return 1;
	}
	setup_handles();
	root.ino = st.st_ino;
	root.dev = st.st_dev;
	root.nlookup = 2;
	root.slot = -1;
	table = calloc(BUCKETS, sizeof(*table));
	if (!table) {
		fprintf(stderr, "latencyfs: out of memory\n");
		return 1;
	}
	flight.window_start_ns = flight.busy_since_ns = now_ns();

	/* No default_permissions: with it the kernel checks permissions itself and asks for a
	 * directory's attributes again (a GETATTR) after every change to it, a request per created
	 * file that NFS clients do not make (they take the directory's new attributes from the
	 * reply). Without it, and without allow_other, only the user who mounted can enter, and
	 * the real permission checks happen underneath, as on an NFS server. */
	char mount_opts[1400];
	snprintf(mount_opts, sizeof(mount_opts), "fsname=latencyfs,subtype=latencyfs%s", extra_opts);
	char *fuse_argv[] = {argv[0], "-o", mount_opts, NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		return 1;
	int ret = 1;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (cfg.control && start_control() != 0)
		goto out_signals;
	if (fuse_session_mount(se, cfg.mountpoint) != 0)
		goto out_signals;

	struct fuse_loop_config *loop = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(loop, (unsigned)cfg.max_threads);
	/* Keep idle threads: a burst after a pause should not pay thread creation per request. */
	fuse_loop_cfg_set_idle_threads(loop, (unsigned)cfg.max_threads);
	fuse_loop_cfg_set_clone_fd(loop, 0);
	if (delayed()) {
		if (start_sender() != 0)
			goto out_unmount;
		sem_init(&slots, 0, (unsigned)cfg.max_threads);
		slots_bound = true;
	}
	ret = fuse_session_loop_mt(se, loop);
	stop_sender();
out_unmount:
	fuse_loop_cfg_destroy(loop);
	fuse_session_unmount(se);

	if (cfg.stats_file) {
		char *json = stats_json(false);
		FILE *f = json ? fopen(cfg.stats_file, "w") : NULL;
		if (!f || fputs(json, f) < 0 || fclose(f) != 0)
			fprintf(stderr, "latencyfs: writing %s: %s\n", cfg.stats_file, strerror(errno));
		free(json);
	}
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
	if (cfg.control)
		unlink(cfg.control);
	return ret ? 1 : 0;
}
