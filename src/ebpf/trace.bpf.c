// SPDX-License-Identifier: MIT OR GPL-2.0
/* inspect --trace with eBPF: the target's reads, writes and waits on TCP
 * sockets, and when each write's bytes left the host.
 *
 * sys_enter/sys_exit are the syscall tracepoints, BTF-typed (tp_btf): the
 * registers and the task's descriptor table are plain loads, not helper
 * calls, since every syscall on the host passes through here. Which syscall
 * numbers matter, and what each is, comes from the `calls` map that userspace
 * fills from its own table; which processes, from the `traced` bitmap.
 * Everything else returns after two array lookups (inlined: no helper call). */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* What a syscall number is (the `calls` map's values). */
#define C_READ 1   /* reads arg0 */
#define C_WRITE 2  /* writes arg0 */
#define C_WAIT 3   /* epoll, poll, select */
#define C_SPLICE 4 /* splice(in = arg0, …, out = arg2, …) */
#define C_ACCEPT 5 /* the result is a new connection */

/* Record kinds. */
#define EV_CALL 1
#define EV_XMIT 2
#define EV_RETRANS 3
#define EV_DROP 4

#define S_IFMT 0170000
#define S_IFSOCK 0140000
#define IPPROTO_TCP 6
#define SOCK_STREAM 1
#define AF_INET6 10
#define RB_NO_WAKEUP 1 /* userspace polls the ring: no wakeup per record */

/* One record; the layout is mirrored by `Raw` in src/inspect/trace/ebpf.rs. */
struct event {
	__u64 t_enter;     /* ns, CLOCK_MONOTONIC */
	__u64 t_exit;
	__u64 sk;          /* the socket's address: an id for joining, never dereferenced */
	__u64 ino;         /* socket inode */
	__s64 ret;
	__u64 arg2;
	__u64 arg3;
	__u32 tid;
	__u32 tgid;
	__u32 nr;
	__s32 fd;
	__u32 seq;         /* call: write_seq after it; xmit/retrans/drop: first byte */
	__u32 snd_nxt;     /* call: snd_nxt after it; xmit/retrans/drop: end */
	__u32 packets_out;
	__u32 mss;
	__u16 kind;
	__u8 code;
	__u8 nonagle;
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u16 left;        /* call: a device sent the last byte during the call */
	__u8 laddr[16];
	__u8 raddr[16];
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

/* A traced thread's current call: when it began. Indexed by the thread id's
 * low bits (an array: no lock, no allocation); the id is kept to tell two
 * threads on one slot apart (the later one is then timed from its exit). */
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

/* A socket a traced process read or wrote: the last byte a device sent, and
 * when; and the end of written bytes not yet seen leaving. Only these
 * sockets' packets are looked at. */
struct sent {
	__u64 last_t;
	__u32 last_end;
	__u32 pending_end;
	__u32 pending;
	__u32 pad;
};

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

/* [0] records lost (ring full), [1] records sent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&counts, &i);
	if (n)
		*n += 1;
}

static __always_inline struct event *reserve(void)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	count(e ? 1 : 0);
	return e;
}

/* The TCP socket behind descriptor `fd` of the current process, or 0. The
 * walk to the descriptor array is plain loads on BTF pointers; from the
 * file on, helper reads. */
static __always_inline struct sock *fd_sock(int fd, __u64 *ino)
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

static __always_inline void addresses(struct event *e, struct sock *sk)
{
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u16 dport = BPF_CORE_READ(sk, __sk_common.skc_dport);
	e->rport = __builtin_bswap16(dport);
	if (e->family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->laddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&e->raddr, sk, __sk_common.skc_v6_daddr);
	} else {
		BPF_CORE_READ_INTO((__u32 *)e->laddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)e->raddr, sk, __sk_common.skc_daddr);
	}
}

/* tp_btf/sys_enter: (struct pt_regs *regs, long id). */
SEC("tp_btf/sys_enter")
int trace_enter(__u64 *ctx)
{
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
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	__u32 nr = regs->orig_ax;
	__u8 *codep = bpf_map_lookup_elem(&calls, &nr);
	if (!codep || !*codep)
		return 0;
	__u8 code = *codep;
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
	__u64 ino = 0;
	int fd = -1;
	__u8 dir = code;
	if (code == C_READ || code == C_WRITE) {
		fd = a0;
		sk = fd_sock(fd, &ino);
	} else if (code == C_SPLICE) {
		fd = a2;
		dir = C_WRITE;
		sk = fd_sock(fd, &ino);
		if (!sk) {
			fd = a0;
			dir = C_READ;
			sk = fd_sock(fd, &ino);
		}
	} else if (code == C_ACCEPT && ret >= 0) {
		fd = ret;
		sk = fd_sock(fd, &ino);
	}
	if (code != C_WAIT && !sk)
		return 0;
	struct event *e = reserve();
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = EV_CALL;
	e->t_enter = enter;
	e->t_exit = now;
	e->tid = tid;
	e->tgid = tgid;
	e->nr = nr;
	e->code = dir;
	e->fd = fd;
	e->ret = ret;
	e->arg2 = a2;
	e->arg3 = regs->r10;
	if (sk) {
		e->sk = (__u64)sk;
		e->ino = ino;
		__u64 key = (__u64)sk;
		struct sent *v = bpf_map_lookup_elem(&socks, &key);
		/* Addresses on a socket's first record only (family 0 after). */
		if (!v)
			addresses(e, sk);
		if (dir == C_WRITE) {
			struct tcp_sock *tp = (void *)sk;
			e->seq = BPF_CORE_READ(tp, write_seq);
			e->snd_nxt = BPF_CORE_READ(tp, snd_nxt);
			e->packets_out = BPF_CORE_READ(tp, packets_out);
			e->mss = BPF_CORE_READ(tp, mss_cache);
			e->nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
			e->left = v && v->last_t >= enter && (__s32)(v->last_end - e->seq) >= 0;
			if (ret > 0 && !e->left) {
				/* Not out yet (held, or queued below TCP): watch for it. */
				if (v) {
					v->pending_end = e->seq;
					v->pending = 1;
				} else {
					struct sent n = {.pending_end = e->seq, .pending = 1};
					bpf_map_update_elem(&socks, &key, &n, BPF_ANY);
				}
			}
		} else if (!v) {
			/* Known from its first read on, so the next write's packets are seen. */
			struct sent n = {};
			bpf_map_update_elem(&socks, &key, &n, BPF_NOEXIST);
		}
	}
	bpf_ringbuf_submit(e, RB_NO_WAKEUP);
	return 0;
}

/* A process forked by a traced one is traced too. */
SEC("raw_tracepoint/sched_process_fork")
int trace_fork(struct bpf_raw_tracepoint_args *ctx)
{
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

/* A record of a segment of socket `key`: sent, re-sent or dropped. */
static __always_inline void segment(__u16 kind, __u64 key, __u32 seq, __u32 end, __u64 now)
{
	struct event *e = reserve();
	if (!e)
		return;
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->t_enter = e->t_exit = now;
	e->sk = key;
	e->seq = seq;
	e->snd_nxt = end;
	bpf_ringbuf_submit(e, RB_NO_WAKEUP);
}

/* A packet of a watched socket handed to a device: its sequence range.
 * tp_btf/net_dev_start_xmit: (struct sk_buff *skb, struct net_device *dev). */
SEC("tp_btf/net_dev_start_xmit")
int trace_xmit(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	__u64 key = (__u64)skb->sk;
	if (!key)
		return 0;
	struct sent *v = bpf_map_lookup_elem(&socks, &key);
	if (!v)
		return 0;
	__u32 seq, end;
	__u16 sport;
	if (!tcp_range(skb, &seq, &end, &sport))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	v->last_t = now;
	v->last_end = end;
	if (!v->pending)
		return 0;
	if ((__s32)(end - v->pending_end) >= 0)
		v->pending = 0;
	segment(EV_XMIT, key, seq, end, now);
	return 0;
}

/* TCP re-sends a segment of a watched socket. */
SEC("raw_tracepoint/tcp_retransmit_skb")
int trace_retransmit(struct bpf_raw_tracepoint_args *ctx)
{
	struct sk_buff *skb = (void *)ctx->args[1];
	__u64 key = ctx->args[0];
	if (!bpf_map_lookup_elem(&socks, &key))
		return 0;
	__u32 range[2];
	if (bpf_probe_read_kernel(range, sizeof(range), skb->cb))
		return 0;
	segment(EV_RETRANS, key, range[0], range[1], bpf_ktime_get_ns());
	return 0;
}

/* A packet of a watched socket dropped before it left the host (netfilter,
 * a qdisc): TCP keeps its bytes and sends them again later, which on the
 * wire looks like a hold. */
SEC("tp_btf/kfree_skb")
int trace_drop(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	__u64 key = (__u64)skb->sk;
	if (!key || !bpf_map_lookup_elem(&socks, &key))
		return 0;
	__u32 seq, end;
	__u16 sport;
	if (!tcp_range(skb, &seq, &end, &sport))
		return 0;
	/* Only the socket's own data going out: a dropped incoming segment
	 * carries the peer's sequence numbers. */
	if (sport != BPF_CORE_READ((struct sock *)key, __sk_common.skc_num))
		return 0;
	segment(EV_DROP, key, seq, end, bpf_ktime_get_ns());
	return 0;
}
