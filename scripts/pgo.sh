#!/usr/bin/env bash
# Builds tcpdoctor with profile-guided optimisation (PGO): an instrumented
# build analyses every capture in tests/data, and the release build is then
# optimised for the paths those runs took. `analyze` on one thread takes
# 12-18 % less time than with a plain `cargo build --release` (bench/RESULTS.md). scripts/dist.sh builds
# the release artefacts this way; the quick start's plain build is unchanged.
#
#   scripts/pgo.sh [--target TRIPLE]    (default: the host's)
#
# Prints the optimised binary's path last: target/TRIPLE/release/tcpdoctor,
# beside it tcpdoctor.source, the fingerprint of the sources it was built
# from (the benches refuse the binary once the tree differs; bench/lib.sh).
# The profile itself is kept in target/pgo/TRIPLE.profdata.
#
# Needs llvm-profdata of the same Rust toolchain: `rustup component add llvm-tools`.
# Extra environment (CC_x86_64_unknown_linux_musl=musl-gcc, say) is passed to cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "scripts/pgo.sh: $*" >&2; exit 1; }

target=""
case "${1:-}" in
  "") ;;
  --target) target=${2:?--target needs a target triple, e.g. x86_64-unknown-linux-musl} ;;
  *) die "unknown option '$1' (the only one is --target TRIPLE)" ;;
esac

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
[ -x "$profdata" ] || die "llvm-profdata is missing; run: rustup component add llvm-tools"
# The caller's RUSTFLAGS (if any) come first; the profile flags are added to them.
flags=${RUSTFLAGS:+$RUSTFLAGS }

# Always an explicit target: RUSTFLAGS then reach only the binary's crates,
# not build scripts or proc macros (whose runs would add profiles of their own).
target=${target:-$host}

# The raw profiles go to a fresh private directory inside target/, not /tmp:
# the instrumented binary (target/pgo-gen/) keeps that path, and a run of it
# after this script must not write where another user could make the
# directory again. Only the merged profile is kept.
mkdir -p target/pgo
# What the build reads, fingerprinted before it starts: the benches compare
# it with the tree they measure (bench/lib.sh's check_fresh).
# shellcheck source=bench/lib.sh
. bench/lib.sh
fingerprint=$(source_fingerprint .)
raw=$(mktemp -d "$PWD/target/pgo/raw.XXXXXX")
trap 'rm -rf "$raw"' EXIT
gen="target/pgo-gen/$target/release/tcpdoctor"

# 1. The instrumented build, in a target directory of its own.
RUSTFLAGS="${flags}-Cprofile-generate=$raw" CARGO_TARGET_DIR=target/pgo-gen \
  cargo build --release --locked --target "$target" --bin tcpdoctor

# 2. The training runs: every capture the tests ship, each in JSON with one
#    and two threads (the single walk and the shared windows) and as text.
#    Their verdicts are not checked here (the tests do that), but a run that
#    fails (any exit but 0, or 4: partial input, a damaged capture) would
#    leave its paths cold, so it ends the build.
runs=0
while IFS= read -r f; do
  for args in "--json --threads 1" "--json --threads 2" ""; do
    rc=0
    # shellcheck disable=SC2086 # the options' words, split as written
    LLVM_PROFILE_FILE="$raw/%m_%p.profraw" "$gen" analyze "$f" $args >/dev/null 2>&1 || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 4 ] || die "training run failed (exit $rc): $gen analyze $f $args"
    runs=$((runs + 1))
  done
done < <(find tests/data -type f \( -name '*.pcap' -o -name '*.pcapng' \) | LC_ALL=C sort)
[ "$runs" -gt 0 ] || die "no captures found in tests/data"

"$profdata" merge -o "target/pgo/$target.profdata" "$raw"
echo "scripts/pgo.sh: profile of $runs runs in target/pgo/$target.profdata" >&2

# 3. The optimised build (its stamp goes first: a new binary never pairs with an old one).
stamp="target/$target/release/tcpdoctor.source"
rm -f "$stamp"
RUSTFLAGS="${flags}-Cprofile-use=$PWD/target/pgo/$target.profdata" \
  cargo build --release --locked --target "$target" --bin tcpdoctor
[ -z "$fingerprint" ] || echo "$fingerprint" > "$stamp"
echo "target/$target/release/tcpdoctor"
