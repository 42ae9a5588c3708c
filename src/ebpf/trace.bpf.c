// SPDX-License-Identifier: MIT OR GPL-2.0
/* inspect --trace with eBPF: the target's reads and writes on TCP sockets,
 * and when each write's bytes left the host.
 *
 * The calls are seen one of two ways; userspace loads one:
 * - sock (default): sock_send_length and sock_recv_length fire at the end of
 *   sock_sendmsg/sock_recvmsg, so only socket I/O runs a program and the rest
 *   of the host's syscalls run none. The syscall and its descriptor come from
 *   the task's saved user registers. No waits, and no entry times.
 * - syscalls (the fallback where those do not load): sys_enter/sys_exit. Once
 *   attached, every syscall on the host takes the tracepoint path.
 * Which processes: the `traced` bitmap. What a syscall number is: the `calls`
 * map, filled by userspace from its own table. Both are BTF-typed (tp_btf),
 * so most kernel fields are plain loads, not helper calls. */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by userspace at load: 1 when the syscall programs are the ones attached. */
const volatile __u8 syscalls = 0;
/* Set by userspace at load for the benchmark's floor: every program returns at
 * once, so what remains is the cost of being attached to these hooks at all. */
const volatile __u8 empty = 0;

/* What a syscall number is: the low bits of a `calls` value. */
#define C_READ 1   /* reads arg0 */
#define C_WRITE 2  /* writes arg0 */
#define C_WAIT 3   /* epoll, poll, select */
#define C_SPLICE 4 /* splice(in = arg0, …, out = arg2, …) */
#define C_ACCEPT 5 /* the result is a new connection */
#define C_MASK 7
/* Bits 4-5: the register holding the argument userspace wants (A_*). */
#define A_SHIFT 4
#define A_DX 1
#define A_R10 2
#define A_R8 3

/* Record kinds: each record starts with its kind. */
#define EV_CALL 1
#define EV_XMIT 2
#define EV_RETRANS 3
#define EV_DROP 4
#define EV_SOCK 5

/* call.bits */
#define B_LEFT 1      /* a device sent the write's last byte during the call */
#define B_IN_FLIGHT 2 /* unacknowledged segments after the call */
#define B_NONAGLE_SHIFT 4

#define S_IFMT 0170000
#define S_IFSOCK 0140000
#define IPPROTO_TCP 6
#define SOCK_STREAM 1
#define AF_INET6 10
#define RB_NO_WAKEUP 1 /* userspace polls the ring: no wakeup per record */

/* The records; mirrored in src/inspect/trace/records.rs. */
struct call {
	__u8 kind;
	__u8 dir;      /* C_READ, C_WRITE; C_WAIT, C_ACCEPT (syscalls only) */
	__u8 bits;
	__u8 pad;
	__u32 ino;     /* socket inode; 0 for a wait */
	__u64 t;       /* the call's end, ns CLOCK_MONOTONIC */
	__u64 t_enter; /* its start; 0 when not known (sock) */
	__u32 tid;
	__u32 tgid;
	__s32 ret;
	__s32 fd;      /* -1: not a socket syscall (io_uring, the kernel's own) */
	__u16 nr;
	__u16 mss;     /* writes: send MSS */
	__u32 arg;     /* MSG_* flags of send*, the byte count of sendfile/splice */
	__u32 seq;     /* writes: write_seq after the call (the end of its bytes) */
	__u32 snd_nxt; /* writes: snd_nxt after the call */
};

/* A socket's addresses, sent once, before its first call. */
struct sockrec {
	__u8 kind;
	__u8 pad;
	__u16 family;
	__u32 ino;
	__u16 lport;
	__u16 rport;
	__u32 pad2;
	__u8 laddr[16];
	__u8 raddr[16];
};

/* A segment of a watched socket sent, re-sent or dropped. */
struct segment {
	__u8 kind;
	__u8 pad[3];
	__u32 ino;
	__u64 t;
	__u32 seq; /* first byte */
	__u32 end;
};

/* The traced processes: one bit per process id (pid_max is at most 2^22),
 * 64 to a word; set by userspace and by trace_fork. */
#define PID_WORDS 65536
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PID_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} traced SEC(".maps");

static __always_inline int is_traced(__u32 tgid)
{
	__u32 w = tgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&traced, &w);
	return bits && ((*bits >> (tgid & 63)) & 1);
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, __u8);
} calls SEC(".maps");

/* A socket a traced process read or wrote: its inode, the end of the bytes a
 * device sent, and the end of written bytes not yet seen leaving. Only these
 * sockets' packets are looked at.
 *
 * `track`: the socket's route may queue packets below TCP (a qdisc), so a
 * write that TCP sent during the call may still be waiting for the device:
 * every packet's end is followed (`last_end`) to tell. On a route without a
 * queue (loopback, veth: noqueue) TCP hands each packet to the device before
 * the call returns, so a write whose bytes TCP sent (snd_nxt reached
 * write_seq) left during it, and only writes TCP held need their packets read. */
struct sent {
	__u32 ino;
	__u32 last_end;
	__u32 pending_end;
	__u8 seen; /* last_end is set */
	__u8 pending;
	__u8 track;
	__u8 reads; /* reads that returned data, up to 2 */
};

/* sock: kept in the socket itself, freed with it (no lookup by hash, no
 * stale entry when a socket's memory is reused). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sent);
} sk_sent SEC(".maps");

/* syscalls: the socket is found through a probe read, which sk storage does
 * not take; an LRU keyed by its address instead. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct sent);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

/* [0] records lost (ring full); userspace counts the ones it receives.
 * [1] calls seen on TCP_NODELAY sockets of traced processes (sock only).
 * [2] calls seen on their other sockets (Nagle on, or corked) after two
 *     reads of data on the socket (sock only): while there are none, userspace
 *     may attach the call programs in slices. A connection's first response
 *     is not counted: its peer ACKs it at once (quick-ACK), so Nagle cannot
 *     stall it, and nginx turns TCP_NODELAY on only once it keeps a
 *     connection alive: every first response it writes has Nagle on. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* Records are staged per CPU and sent to the ring a stage at a time: one
 * ring write (a lock, and stalls on the ring's cold cache lines) per ~70
 * records instead of per record. A program that finds its CPU's stage busy
 * (it interrupted, or preempted, another that was filling it) writes its
 * record to the ring directly. So records reach userspace out of order
 * across CPUs (it sorts them by time), and what is left in the stages is
 * read from the map after the programs are detached. */
#define STAGE_BYTES 4096
#define MAX_RECORD 56
struct stage {
	__u32 off;  /* bytes used */
	__u32 n;    /* records in it */
	__u32 busy;
	__u32 pad;
	__u8 buf[STAGE_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stage);
} stages SEC(".maps");

static __always_inline void count(__u32 i, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counts, &i);
	if (c)
		*c += n;
}

static __always_inline void count_lost(__u64 n)
{
	count(0, n);
}

/* {mask, pick}: mask 0 traces every socket. Otherwise, of the sockets with
 * TCP_NODELAY (and no cork) only those whose hash & mask is pick are.
 * Userspace sets it once such sockets' calls come faster than a trace
 * needs: their writes cannot be held by Nagle, and each traced call costs
 * the process CPU. Sockets with Nagle on, or corked, are always traced. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sampling SEC(".maps");

#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2

/* A socket's hash from its two ports (userspace computes the same one, in
 * src/inspect/trace/ebpf/sample.rs, to pick a socket it knows). */
static __always_inline __u32 sock_hash(struct sock *sk)
{
	__u32 h = (__u32)__builtin_bswap16(sk->__sk_common.skc_dport) << 16 | sk->__sk_common.skc_num;
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	return h ^ (h >> 16);
}

#define barrier() asm volatile("" ::: "memory")
/* Rare branches: laid out after the common path, which then spans fewer
 * instruction cache lines in the programs every traced call runs. */
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Sends record `rec` of `size` bytes (a constant: a multiple of 8, at most
 * MAX_RECORD). `busy` is set before the stage is touched and cleared after,
 * with compiler barriers: a program nested on this CPU sees it set for the
 * whole time and leaves the stage alone. */
static __always_inline void put(void *rec, __u32 size)
{
	__u32 zero = 0;
	struct stage *st = bpf_map_lookup_elem(&stages, &zero);
	if (unlikely(!st || st->busy)) {
		if (bpf_ringbuf_output(&events, rec, size, RB_NO_WAKEUP))
			count_lost(1);
		return;
	}
	st->busy = 1;
	barrier();
	__u32 off = st->off;
	if (unlikely(off > STAGE_BYTES - MAX_RECORD)) {
		if (off > STAGE_BYTES)
			off = STAGE_BYTES;
		if (bpf_ringbuf_output(&events, st->buf, off, RB_NO_WAKEUP))
			count_lost(st->n);
		off = 0;
		st->n = 0;
	}
	if (off <= STAGE_BYTES - MAX_RECORD) {
		__builtin_memcpy(st->buf + off, rec, size);
		st->off = off + size;
		st->n += 1;
	}
	barrier();
	st->busy = 0;
}

static __always_inline void *reserve(__u64 size)
{
	void *e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e)
		count_lost(1);
	return e;
}

/* Whether `a` comes at or after `b` in sequence space. */
static __always_inline int after_eq(__u32 a, __u32 b)
{
	return (__s32)(a - b) >= 0;
}

/* Sends a socket's addresses (once: `v` is new). */
static __always_inline void sock_record(struct sock *sk, __u32 ino)
{
	struct sockrec *r = reserve(sizeof(*r));
	if (!r)
		return;
	__builtin_memset(r, 0, sizeof(*r));
	r->kind = EV_SOCK;
	r->ino = ino;
	r->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	r->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u16 dport = BPF_CORE_READ(sk, __sk_common.skc_dport);
	r->rport = __builtin_bswap16(dport);
	if (r->family == AF_INET6) {
		BPF_CORE_READ_INTO(&r->laddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&r->raddr, sk, __sk_common.skc_v6_daddr);
	} else {
		BPF_CORE_READ_INTO((__u32 *)r->laddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)r->raddr, sk, __sk_common.skc_daddr);
	}
	bpf_ringbuf_submit(r, RB_NO_WAKEUP);
}

/* [0]: set once a socket needs its packets read (a write not out when its
 * call returned, or a route with a queue). Userspace keeps the transmit
 * program attached only from then on: on a busy host it runs for every
 * packet, and with every write out at once it would have nothing to do. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} want_xmit SEC(".maps");

static __always_inline void need_xmit(void)
{
	__u32 zero = 0;
	__u32 *w = bpf_map_lookup_elem(&want_xmit, &zero);
	if (w && !*w)
		*w = 1;
}

/* A write's bytes: whether they left during the call, and if not, watch
 * the socket's packets for them. */
static __always_inline void follow(struct call *e, struct sent *v)
{
	if (v->track ? v->seen && after_eq(v->last_end, e->seq) : after_eq(e->snd_nxt, e->seq))
		e->bits |= B_LEFT;
	else if (e->ret > 0) {
		/* Not out yet (held, or queued below TCP). */
		v->pending_end = e->seq;
		v->pending = 1;
		need_xmit();
	}
}

static __always_inline __u32 arg_of(__u8 code, struct pt_regs *regs)
{
	switch (code >> A_SHIFT) {
	case A_DX:
		return regs->dx;
	case A_R10:
		return regs->r10;
	case A_R8:
		return regs->r8;
	}
	return 0;
}

/* Whether the socket's route goes to a device without a queue (its first
 * transmit queue has no enqueue: noqueue, as on loopback and veth). Unknown
 * (no cached route yet) counts as queued: its packets are followed. */
static __always_inline int noqueue(struct sock *sk)
{
	struct dst_entry *dst = sk->sk_dst_cache;
	if (!dst)
		return 0;
	struct net_device *dev = dst->dev;
	if (!dev)
		return 0;
	struct netdev_queue *txq = dev->_tx;
	if (!txq)
		return 0;
	struct Qdisc *q = txq->qdisc;
	return q && !q->enqueue;
}

/* sock: a read or write on a socket of a traced process, at its end.
 * tp_btf/sock_{send,recv}_length: (struct sock *sk, int ret, int flags). */
static __always_inline int on_sock_call(__u64 *ctx, __u8 dir)
{
	/* The task, not bpf_get_current_pid_tgid: its ids are plain loads, and
	 * it is needed for the saved registers anyway (a helper call costs). */
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid = task->tgid;
	if (!is_traced(tgid))
		return 0;
	struct sock *sk = (struct sock *)ctx[0];
	/* TCP only (its sockets are all SOCK_STREAM). */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u8 nonagle = BPF_CORE_READ_BITFIELD(tp, nonagle);
	/* (The push bit, left by an uncork, does not matter.) */
	int nagle = (nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)) != TCP_NAGLE_OFF;
	if (!nagle) {
		__u32 zero = 0;
		__u64 *sm = bpf_map_lookup_elem(&sampling, &zero);
		__u32 mask = sm ? (__u32)*sm : 0;
		if (mask && (sock_hash(sk) & mask) != (__u32)(*sm >> 32))
			return 0;
		count(1, 1);
	}
	struct sent *v = bpf_sk_storage_get(&sk_sent, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!v)
		return 0;
	if (unlikely(!v->ino)) {
		struct socket *so = sk->sk_socket;
		__u32 ino = so ? so->file->f_inode->i_ino : 0;
		/* A socket with no file (the kernel's own) has nothing to name it by. */
		if (!ino)
			return 0;
		v->ino = ino;
		v->track = !noqueue(sk);
		if (v->track)
			need_xmit();
		sock_record(sk, ino);
	}
	if (dir == C_READ && (int)ctx[1] > 0 && v->reads < 2)
		v->reads++;
	else if (nagle && v->reads >= 2)
		count(2, 1);
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	__u32 nr = regs->orig_ax;
	__u8 *cp = bpf_map_lookup_elem(&calls, &nr);
	__u8 code = cp ? *cp : 0;
	__u8 what = code & C_MASK;
	int fd = -1;
	/* A socket syscall of this direction names the descriptor; anything
	 * else (io_uring, a send made by the kernel) is mapped by inode later. */
	if (what == C_SPLICE)
		fd = dir == C_WRITE ? regs->dx : regs->di;
	else if (what == dir)
		fd = regs->di;
	/* Every field set at once (the rest zero): no separate memset. */
	struct call rec = {
		.kind = EV_CALL,
		.dir = dir,
		.ino = v->ino,
		.t = bpf_ktime_get_ns(),
		.tid = task->pid,
		.tgid = tgid,
		.ret = ctx[1],
		.fd = fd,
		.nr = nr,
		.arg = fd >= 0 ? arg_of(code, regs) : 0,
	};
	if (dir == C_WRITE) {
		rec.seq = tp->write_seq;
		rec.snd_nxt = tp->snd_nxt;
		rec.mss = tp->mss_cache;
		if (tp->packets_out)
			rec.bits |= B_IN_FLIGHT;
		rec.bits |= nonagle << B_NONAGLE_SHIFT;
		follow(&rec, v);
	}
	put(&rec, sizeof(rec));
	return 0;
}

SEC("tp_btf/sock_send_length")
int trace_send(__u64 *ctx)
{
	if (empty)
		return 0;
	return on_sock_call(ctx, C_WRITE);
}

SEC("tp_btf/sock_recv_length")
int trace_recv(__u64 *ctx)
{
	if (empty)
		return 0;
	return on_sock_call(ctx, C_READ);
}

/* syscalls: a traced thread's current call, when it began. Indexed by the
 * thread id's low bits (an array: no lock, no allocation); the id is kept to
 * tell two threads on one slot apart (the later one is then timed from its exit). */
#define ENTRY_SLOTS 65536
struct entry {
	__u64 t;
	__u32 tid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ENTRY_SLOTS);
	__type(key, __u32);
	__type(value, struct entry);
} entries SEC(".maps");

/* The TCP socket behind descriptor `fd` of the current process, or 0. The
 * walk to the descriptor array is plain loads on BTF pointers; from the
 * file on, helper reads. */
static __always_inline struct sock *fd_sock(int fd, __u32 *ino)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = task->files->fdt;
	if (!fdt || fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return 0;
	struct file **fds = fdt->fd;
	struct file *f = 0;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	if (!f)
		return 0;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	if ((BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFSOCK)
		return 0;
	struct socket *so = BPF_CORE_READ(f, private_data);
	struct sock *sk = BPF_CORE_READ(so, sk);
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP || BPF_CORE_READ(sk, sk_type) != SOCK_STREAM)
		return 0;
	*ino = BPF_CORE_READ(inode, i_ino);
	return sk;
}

/* tp_btf/sys_enter: (struct pt_regs *regs, long id). */
SEC("tp_btf/sys_enter")
int trace_enter(__u64 *ctx)
{
	if (empty)
		return 0;
	__u32 nr = ctx[1];
	__u8 *code = bpf_map_lookup_elem(&calls, &nr);
	if (!code || !*code)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = id;
	if (!is_traced(tgid))
		return 0;
	__u32 slot = tid & (ENTRY_SLOTS - 1);
	struct entry *en = bpf_map_lookup_elem(&entries, &slot);
	if (en) {
		en->t = bpf_ktime_get_ns();
		en->tid = tid;
	}
	return 0;
}

/* tp_btf/sys_exit: (struct pt_regs *regs, long ret). */
SEC("tp_btf/sys_exit")
int trace_exit(__u64 *ctx)
{
	if (empty)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	__u32 nr = regs->orig_ax;
	__u8 *codep = bpf_map_lookup_elem(&calls, &nr);
	if (!codep || !*codep)
		return 0;
	__u8 code = *codep, what = code & C_MASK;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = id;
	if (!is_traced(tgid))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 enter = now;
	__u32 slot = tid & (ENTRY_SLOTS - 1);
	struct entry *en = bpf_map_lookup_elem(&entries, &slot);
	if (en && en->tid == tid && en->t) {
		enter = en->t;
		en->t = 0;
	}
	long ret = ctx[1];
	/* The arguments are still in the saved registers at exit. */
	__u64 a0 = regs->di, a2 = regs->dx;
	struct sock *sk = 0;
	__u32 ino = 0;
	int fd = -1;
	__u8 dir = what;
	if (what == C_READ || what == C_WRITE) {
		fd = a0;
		sk = fd_sock(fd, &ino);
	} else if (what == C_SPLICE) {
		fd = a2;
		dir = C_WRITE;
		sk = fd_sock(fd, &ino);
		if (!sk) {
			fd = a0;
			dir = C_READ;
			sk = fd_sock(fd, &ino);
		}
	} else if (what == C_ACCEPT && ret >= 0) {
		fd = ret;
		sk = fd_sock(fd, &ino);
	}
	if (what != C_WAIT && !sk)
		return 0;
	struct sent *v = 0;
	if (sk) {
		__u64 key = (__u64)sk;
		v = bpf_map_lookup_elem(&socks, &key);
		if (!v || v->ino != ino) {
			/* New, or another socket at a freed one's address. */
			/* The socket came from a probe read: its route is not known here. */
			struct sent n = {.ino = ino, .track = 1};
			bpf_map_update_elem(&socks, &key, &n, BPF_ANY);
			need_xmit();
			v = bpf_map_lookup_elem(&socks, &key);
			sock_record(sk, ino);
		}
	}
	struct call rec = {
		.kind = EV_CALL,
		.dir = dir,
		.ino = ino,
		.t = now,
		.t_enter = enter,
		.tid = tid,
		.tgid = tgid,
		.nr = nr,
		.fd = fd,
		.ret = ret,
		.arg = arg_of(code, regs),
	};
	if (sk && dir == C_WRITE) {
		struct tcp_sock *tp = (void *)sk;
		rec.seq = BPF_CORE_READ(tp, write_seq);
		rec.snd_nxt = BPF_CORE_READ(tp, snd_nxt);
		rec.mss = BPF_CORE_READ(tp, mss_cache);
		if (BPF_CORE_READ(tp, packets_out))
			rec.bits |= B_IN_FLIGHT;
		rec.bits |= BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle) << B_NONAGLE_SHIFT;
		if (v)
			follow(&rec, v);
	}
	put(&rec, sizeof(rec));
	return 0;
}

/* A process forked by a traced one is traced too. */
SEC("raw_tracepoint/sched_process_fork")
int trace_fork(struct bpf_raw_tracepoint_args *ctx)
{
	if (empty)
		return 0;
	struct task_struct *parent = (void *)ctx->args[0], *child = (void *)ctx->args[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	if (ptgid == ctgid || !is_traced(ptgid))
		return 0;
	/* Not atomic: two forks setting bits of one word at the same instant can
	 * lose one, and that child goes untraced (as a lost record would). */
	__u32 w = ctgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&traced, &w);
	if (bits)
		*bits |= 1ULL << (ctgid & 63);
	return 0;
}

/* The watched state of socket `sk`, or 0: the packet programs run for every
 * packet on the host, so an unwatched socket costs one lookup. */
static __always_inline struct sent *watched(struct sock *sk)
{
	if (!sk)
		return 0;
	if (syscalls) {
		__u64 key = (__u64)sk;
		return bpf_map_lookup_elem(&socks, &key);
	}
	/* A socket no program gave storage (most of the host's): no helper call. */
	if (!sk->sk_bpf_storage)
		return 0;
	return bpf_sk_storage_get(&sk_sent, sk, 0, 0);
}

/* The sequence range of the data in a TCP packet, and its source port; 0
 * when it carries none. */
static __always_inline int tcp_range(struct sk_buff *skb, __u32 *seq, __u32 *end, __u16 *sport)
{
	__u16 th = skb->transport_header;
	if (th == 0xffff)
		return 0;
	unsigned char *head = skb->head, *data = skb->data;
	__u8 hdr[16];
	if (bpf_probe_read_kernel(hdr, sizeof(hdr), head + th))
		return 0;
	*sport = ((__u16)hdr[0] << 8) | hdr[1];
	*seq = ((__u32)hdr[4] << 24) | ((__u32)hdr[5] << 16) | ((__u32)hdr[6] << 8) | hdr[7];
	long payload = (long)skb->len - (long)((head + th) - data) - (long)((hdr[12] >> 4) * 4);
	if (payload <= 0)
		return 0;
	*end = *seq + (__u32)payload;
	return 1;
}

/* A record of a segment of a watched socket: sent, re-sent or dropped. */
static __always_inline void segment(__u8 kind, __u32 ino, __u32 seq, __u32 end)
{
	struct segment rec = {.kind = kind, .ino = ino, .t = bpf_ktime_get_ns(), .seq = seq, .end = end};
	put(&rec, sizeof(rec));
}

/* A packet of a watched socket handed to a device: its sequence range.
 * tp_btf/net_dev_start_xmit: (struct sk_buff *skb, struct net_device *dev). */
SEC("tp_btf/net_dev_start_xmit")
int trace_xmit(__u64 *ctx)
{
	if (empty)
		return 0;
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	struct sent *v = watched(skb->sk);
	/* On a route without a queue only a held write's packets matter. */
	if (!v || !(v->track || v->pending))
		return 0;
	__u32 seq, end;
	__u16 sport;
	if (!tcp_range(skb, &seq, &end, &sport))
		return 0;
	if (!v->seen || after_eq(end, v->last_end)) {
		v->last_end = end;
		v->seen = 1;
	}
	if (!v->pending)
		return 0;
	if (after_eq(end, v->pending_end))
		v->pending = 0;
	segment(EV_XMIT, v->ino, seq, end);
	return 0;
}

/* TCP re-sends a segment of a watched socket.
 * tp_btf/tcp_retransmit_skb: (const struct sock *sk, const struct sk_buff *skb, int err). */
SEC("tp_btf/tcp_retransmit_skb")
int trace_retransmit(__u64 *ctx)
{
	if (empty)
		return 0;
	struct sent *v = watched((struct sock *)ctx[0]);
	if (!v)
		return 0;
	struct sk_buff *skb = (struct sk_buff *)ctx[1];
	__u32 range[2];
	if (bpf_probe_read_kernel(range, sizeof(range), skb->cb))
		return 0;
	segment(EV_RETRANS, v->ino, range[0], range[1]);
	return 0;
}

/* A packet of a watched socket dropped before it left the host (netfilter,
 * a qdisc): TCP keeps its bytes and sends them again later, which on the
 * wire looks like a hold. tp_btf/kfree_skb: (struct sk_buff *skb, …). */
SEC("tp_btf/kfree_skb")
int trace_drop(__u64 *ctx)
{
	if (empty)
		return 0;
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	struct sock *sk = skb->sk;
	struct sent *v = watched(sk);
	if (!v)
		return 0;
	__u32 seq, end;
	__u16 sport;
	if (!tcp_range(skb, &seq, &end, &sport))
		return 0;
	/* Only the socket's own data going out: a dropped incoming segment
	 * carries the peer's sequence numbers. */
	if (sport != BPF_CORE_READ(sk, __sk_common.skc_num))
		return 0;
	segment(EV_DROP, v->ino, seq, end);
	return 0;
}
