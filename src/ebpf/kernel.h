/* The few kernel types the programs read, trimmed by hand. Every struct is
 * marked preserve_access_index: clang records each field access as a CO-RE
 * relocation, and the loader (aya) moves it to the running kernel's offset
 * from /sys/kernel/btf/vmlinux. So field order and padding here do not
 * matter; names and types do. x86_64 only (pt_regs). */
#ifndef TCPDOCTOR_KERNEL_H
#define TCPDOCTOR_KERNEL_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_SK_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

/* The programs' context: UAPI, fixed, so not relocated. */
struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct pt_regs {
	unsigned long r10;
	unsigned long r8;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
};

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
};

struct file {
	void *private_data;
	struct inode *f_inode;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct task_struct {
	int pid;
	int tgid;
	struct files_struct *files;
	struct task_struct *group_leader;
};

struct in6_addr {
	unsigned char in6_u[16];
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct socket;
struct bpf_local_storage;

/* A route's device and its first transmit queue's qdisc: whether packets
 * can wait below TCP (`enqueue` is NULL for noqueue). */
struct Qdisc {
	void *enqueue;
};

struct netdev_queue {
	struct Qdisc *qdisc;
};

struct net_device {
	struct netdev_queue *_tx;
};

struct dst_entry {
	struct net_device *dev;
};

struct sock {
	struct sock_common __sk_common;
	__u16 sk_type;
	__u16 sk_protocol;
	struct socket *sk_socket;
	struct bpf_local_storage *sk_bpf_storage;
	struct dst_entry *sk_dst_cache;
};

struct socket {
	struct file *file;
	struct sock *sk;
};

struct tcp_sock {
	__u32 write_seq;
	__u32 snd_nxt;
	__u32 packets_out;
	__u32 mss_cache;
	__u8 nonagle : 4;
};

struct sk_buff {
	struct sock *sk;
	unsigned int len;
	__u16 transport_header;
	unsigned char *head;
	unsigned char *data;
	char cb[48];
};

#pragma clang attribute pop


#endif
