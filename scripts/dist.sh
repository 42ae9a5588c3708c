#!/usr/bin/env bash
# Builds the release artefacts into dist/: a static x86_64 (musl) binary,
# stripped, with its debug info in a separate file; a tarball; a .deb; the
# Containerfile and its build context. With --image, also builds the container
# image with podman (and saves it in dist/ as an OCI archive).
#
# Needs the musl target (`rustup target add x86_64-unknown-linux-musl`), a C
# compiler for it (ring's assembly: Debian's musl-tools, installed here when
# missing and running as root), llvm-profdata (`rustup component add
# llvm-tools`: the binary is built with profile-guided optimisation, see
# scripts/pgo.sh), objcopy (binutils) and dpkg-deb.
set -euo pipefail
cd "$(dirname "$0")/.."

image=false
case "${1:-}" in
  "") ;;
  --image) image=true ;;
  *) echo "scripts/dist.sh: unknown option '$1' (the only one is --image)" >&2; exit 2 ;;
esac

target=x86_64-unknown-linux-musl
die() { echo "scripts/dist.sh: $*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

if ! rustc --print target-libdir --target "$target" >/dev/null 2>&1 \
   || [ ! -d "$(rustc --print target-libdir --target "$target")" ]; then
  die "the $target target is not installed; run: rustup target add $target"
fi
if ! have musl-gcc; then
  [ "$(id -u)" = 0 ] || die "musl-gcc is missing; run: sudo apt-get install musl-tools"
  echo "scripts/dist.sh: installing musl-tools" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends musl-tools >/dev/null
fi
for t in objcopy dpkg-deb gzip tar; do have "$t" || die "$t is missing (Debian: binutils, dpkg, gzip, tar)"; done

version=$(cargo metadata --no-deps --format-version 1 --locked \
  | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "tcpdoctor"))')
# Reproducible archives: every date is the last commit's.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"

# Built with profile-guided optimisation (scripts/pgo.sh: trained on tests/data's captures).
built=$(CC_x86_64_unknown_linux_musl=musl-gcc scripts/pgo.sh --target "$target" | tail -n 1)

# Everything is assembled in a private directory, then moved into dist/.
umask 022
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="$work/dist"
mkdir -p "$out"

bin="$out/tcpdoctor"
cp "$built" "$bin"
objcopy --only-keep-debug "$bin" "$out/tcpdoctor.debug"
objcopy --strip-all "$bin"
objcopy --add-gnu-debuglink="$out/tcpdoctor.debug" "$bin"
chmod 0755 "$bin"
chmod 0644 "$out/tcpdoctor.debug"
"$bin" --version >/dev/null || die "the static binary does not run here"

gen="$work/gen"
mkdir -p "$gen"
"$bin" man >"$gen/tcpdoctor.1"
"$bin" completions bash >"$gen/tcpdoctor.bash"
"$bin" completions zsh >"$gen/_tcpdoctor"
"$bin" completions fish >"$gen/tcpdoctor.fish"

tarball() { # DIR NAME: NAME.tar.gz of DIR's contents under NAME/
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$(dirname "$1")" --transform "s|^$(basename "$1")|$2|" -cf - "$(basename "$1")" \
    | gzip -9n >"$out/$2.tar.gz"
}

# The tarball: binary, manual, completions, licences, README, the systemd unit, the JSON Schemas.
name="tcpdoctor-$version-$target"
t="$work/$name"
mkdir -p "$t/completions" "$t/systemd" "$t/schema"
cp "$bin" "$t/"
cp README.md LICENSE-MIT LICENSE-APACHE "$gen/tcpdoctor.1" "$t/"
cp "$gen/tcpdoctor.bash" "$gen/_tcpdoctor" "$gen/tcpdoctor.fish" "$t/completions/"
cp deploy/systemd/tcpdoctor-watch.service deploy/systemd/tcpdoctor.default "$t/systemd/"
cp schema/*.json "$t/schema/"
tarball "$t" "$name"

# The .deb (Debian's paths; no maintainer scripts: the service is not enabled).
d="$work/deb"
install -Dm0755 "$bin" "$d/usr/bin/tcpdoctor"
install -d "$d/usr/share/man/man1"
gzip -9n <"$gen/tcpdoctor.1" >"$d/usr/share/man/man1/tcpdoctor.1.gz"
install -Dm0644 "$gen/tcpdoctor.bash" "$d/usr/share/bash-completion/completions/tcpdoctor"
install -Dm0644 "$gen/_tcpdoctor" "$d/usr/share/zsh/vendor-completions/_tcpdoctor"
install -Dm0644 "$gen/tcpdoctor.fish" "$d/usr/share/fish/vendor_completions.d/tcpdoctor.fish"
install -Dm0644 deploy/systemd/tcpdoctor-watch.service "$d/lib/systemd/system/tcpdoctor-watch.service"
install -Dm0644 deploy/systemd/tcpdoctor.default "$d/etc/default/tcpdoctor"
install -d "$d/usr/share/doc/tcpdoctor"
gzip -9n <README.md >"$d/usr/share/doc/tcpdoctor/README.md.gz"
install -d "$d/usr/share/tcpdoctor/schema"
install -m0644 schema/*.json "$d/usr/share/tcpdoctor/schema/"
{
  cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tcpdoctor

Files: *
Copyright: 2026 The tcpdoctor developers
License: MIT or Apache-2.0

License: MIT
EOF
  sed -e 's/^$/./' -e 's/^/ /' LICENSE-MIT
  printf '\nLicense: Apache-2.0\n'
  sed -e '1{/^$/d}' -e 's/^$/./' -e 's/^/ /' LICENSE-APACHE
} >"$d/usr/share/doc/tcpdoctor/copyright"
chmod 0644 "$d/usr/share/doc/tcpdoctor/copyright"
install -d "$d/DEBIAN"
echo /etc/default/tcpdoctor >"$d/DEBIAN/conffiles"
cat >"$d/DEBIAN/control" <<EOF
Package: tcpdoctor
Version: $version
Architecture: amd64
Maintainer: The tcpdoctor developers
Section: net
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$d" | cut -f1)
Description: find where a TCP request's milliseconds go
 tcpdoctor reads packets (capture files or a live interface) and names the
 cause of TCP latency with evidence: Nagle + delayed ACK, retransmission
 timeouts, SYN retries, zero windows, or a slow server. One static binary;
 includes the watch service (tcpdoctor-watch.service, not enabled).
EOF
find "$d" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --build "$d" "$out/tcpdoctor_${version}_amd64.deb" >/dev/null

# The container's build context: the Containerfile beside the binary and licences.
cp deploy/container/Containerfile LICENSE-MIT LICENSE-APACHE "$out/"

if $image; then
  have podman || die "--image needs podman (Debian: apt-get install podman)"
  podman build --quiet --build-arg "VERSION=$version" -t "tcpdoctor:$version" -f "$out/Containerfile" "$out" >/dev/null
  podman save --quiet --format oci-archive -o "$out/tcpdoctor-$version-oci.tar" "tcpdoctor:$version"
fi

rm -rf dist
mv "$out" dist
echo "scripts/dist.sh: built into dist/:"
(cd dist && ls -l)
