// SPDX-License-Identifier: MIT OR GPL-2.0
/* watch's owners: which process sends on each local TCP endpoint.
 *
 * sock_send_length fires in the sender's own context for every sendmsg,
 * write, writev and sendfile on a socket, so it names the process (tgid,
 * comm, cgroup) that owns the endpoint, connections opened before watch
 * started included. The map is an LRU of 8192 endpoints: bounded whatever
 * the host does; userspace reads it only when a stall is found. */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define IPPROTO_TCP 6
#define AF_INET6 10

/* Mirrored by `Key`/`Owner` in src/watch/owners.rs. */
struct key {
	__u16 family;
	__u16 port;
	__u8 addr[16];
};

struct owner {
	__u64 cgroup;
	__u64 seen_ns;
	__u32 tgid;
	__u32 pad;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct key);
	__type(value, struct owner);
} owners SEC(".maps");

SEC("raw_tracepoint/sock_send_length")
int owner_send(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (void *)ctx->args[0];
	if ((int)ctx->args[1] <= 0 || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	struct key k = {};
	k.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	k.port = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (k.family == AF_INET6)
		BPF_CORE_READ_INTO(&k.addr, sk, __sk_common.skc_v6_rcv_saddr);
	else
		BPF_CORE_READ_INTO((__u32 *)k.addr, sk, __sk_common.skc_rcv_saddr);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 now = bpf_ktime_get_ns();
	struct owner *o = bpf_map_lookup_elem(&owners, &k);
	/* The same owner again: refresh its time once a second, no more. */
	if (o && o->tgid == tgid && now - o->seen_ns < 1000000000ULL)
		return 0;
	struct owner v = {};
	v.tgid = tgid;
	v.seen_ns = now;
	v.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(v.comm, sizeof(v.comm));
	bpf_map_update_elem(&owners, &k, &v, BPF_ANY);
	return 0;
}
