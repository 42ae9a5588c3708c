#!/usr/bin/env bash
# Builds the eBPF objects that tcpdoctor embeds (src/ebpf/*.bpf.o) from
# their C source with Debian's clang, and records the sources' and objects'
# sha256 in src/ebpf/SOURCES.sha256: `cargo test --lib ebpf` fails when an
# object is not the build of the current source. The objects are checked in,
# so building tcpdoctor needs no clang.
#   scripts/build-bpf.sh           build (installs clang, llvm, libbpf-dev when missing and root)
#   scripts/build-bpf.sh --check   build into a temporary directory and compare (CI)
set -euo pipefail
cd "$(dirname "$0")/../src/ebpf"
need=()
command -v clang >/dev/null || need+=(clang)
command -v llvm-strip >/dev/null || need+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "build-bpf.sh: needs ${need[*]} (apt-get install ${need[*]})" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
out=.
if [ "${1:-}" = --check ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
sources=(kernel.h owners.bpf.c trace.bpf.c)
for src in owners trace; do
  clang -O2 -g -Wall -Werror -target bpf -D__TARGET_ARCH_x86 -I. -c "$src.bpf.c" -o "$out/$src.bpf.o.tmp"
  # DWARF goes; BTF (needed for CO-RE) stays.
  llvm-strip -g "$out/$src.bpf.o.tmp"
  mv "$out/$src.bpf.o.tmp" "$out/$src.bpf.o"
done
if [ "$out" = . ]; then
  sha256sum "${sources[@]}" owners.bpf.o trace.bpf.o > SOURCES.sha256
  echo "built src/ebpf/owners.bpf.o and trace.bpf.o; hashes in src/ebpf/SOURCES.sha256"
else
  # The sources must be those recorded; the objects are compared by their
  # programs and relocations (a different clang may lay out other bytes).
  sha256sum --quiet -c <(grep -v '\.o$' SOURCES.sha256)
  for o in owners trace; do
    cmp <(llvm-objdump -d -r "$o.bpf.o" | tail -n +3) <(llvm-objdump -d -r "$out/$o.bpf.o" | tail -n +3) \
      || { echo "build-bpf.sh: src/ebpf/$o.bpf.o is not the build of its source: run scripts/build-bpf.sh" >&2; exit 1; }
  done
  echo "src/ebpf objects match their source"
fi
