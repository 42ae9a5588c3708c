#!/usr/bin/env bash
# Checks what scripts/dist.sh built in dist/: the binary is static (no
# program interpreter, no shared library), stripped, linked to its debug
# file, and runs; the tarball holds the licences; the .deb installs with
# dpkg, `tcpdoctor --version`, the manual and the completions work from the
# installed paths, and it purges cleanly. Needs root for dpkg.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "scripts/dist_check.sh: $*" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
bin=dist/tcpdoctor
[ -x "$bin" ] || fail "no $bin; run scripts/dist.sh first"

# Static: no PT_INTERP and no shared library needed (a static PIE keeps a
# dynamic section for relocating itself); file(1) and ldd agree.
readelf -lW "$bin" | grep -q 'INTERP' && fail "$bin has a program interpreter (not static)"
readelf -dW "$bin" | grep -q '(NEEDED)' && fail "$bin needs shared libraries: $(readelf -dW "$bin" | grep NEEDED)"
file -b "$bin" | grep -Eq 'static(-pie)? linked|statically linked' || fail "file: $(file -b "$bin")"
ldd "$bin" 2>&1 | grep -Eq 'not a dynamic executable|statically linked' || fail "ldd: $(ldd "$bin" 2>&1)"
# Stripped, its debug info beside it and linked by name.
readelf -SW "$bin" | grep -q '\.debug_info' && fail "$bin is not stripped"
readelf -SW "$bin" | grep -q '\.symtab' && fail "$bin still has a symbol table"
readelf -SW dist/tcpdoctor.debug | grep -q '\.debug_info' || fail "dist/tcpdoctor.debug has no debug info"
readelf -p .gnu_debuglink "$bin" 2>/dev/null | grep -q 'tcpdoctor.debug' || fail "$bin has no .gnu_debuglink"
# The PGO build, not its instrumented training build (which writes profiles wherever it runs).
readelf -SW "$bin" | grep -q '__llvm_prf' && fail "$bin is the instrumented build (profile sections)"
got=$("$bin" --version)
[ "$got" = "tcpdoctor $version" ] || fail "$bin --version said '$got', not 'tcpdoctor $version'"
# It runs with an empty environment and no file around it (the container's lot).
env -i "$PWD/$bin" demo --offline --json >/dev/null || fail "$bin demo --offline failed"
echo "static binary: ok ($(stat -c %s "$bin") bytes; debug file $(stat -c %s dist/tcpdoctor.debug) bytes)"

# The tarball.
tarball="dist/tcpdoctor-$version-x86_64-unknown-linux-musl.tar.gz"
list=$(tar -tzf "$tarball")
for f in tcpdoctor LICENSE-MIT LICENSE-APACHE README.md tcpdoctor.1 completions/tcpdoctor.bash \
         completions/_tcpdoctor completions/tcpdoctor.fish systemd/tcpdoctor-watch.service systemd/tcpdoctor.default \
         schema/analyze.json schema/watch.json; do
  grep -qx "tcpdoctor-$version-x86_64-unknown-linux-musl/$f" <<<"$list" || fail "$tarball lacks $f"
done
echo "tarball: ok"

# The Containerfile's context.
for f in Containerfile LICENSE-MIT LICENSE-APACHE; do [ -f "dist/$f" ] || fail "dist/$f is missing"; done

# The .deb: install, use, purge. A tcpdoctor package already installed is not ours to replace.
deb="dist/tcpdoctor_${version}_amd64.deb"
[ "$(id -u)" = 0 ] || fail "the .deb check needs root (dpkg -i)"
if dpkg-query -W -f='${Status}' tcpdoctor 2>/dev/null | grep -q 'installed'; then
  fail "a tcpdoctor package is already installed; remove it first (dpkg -r tcpdoctor)"
fi
for f in /usr/bin/tcpdoctor /etc/default/tcpdoctor; do
  [ -e "$f" ] && fail "$f exists outside the package; move it away first"
done
dpkg-deb --info "$deb" >/dev/null
trap 'dpkg --purge tcpdoctor >/dev/null 2>&1 || true' EXIT
dpkg -i "$deb" >/dev/null
got=$(/usr/bin/tcpdoctor --version)
[ "$got" = "tcpdoctor $version" ] || fail "installed tcpdoctor --version said '$got'"
man -w tcpdoctor | grep -qx /usr/share/man/man1/tcpdoctor.1.gz || fail "man does not find the page"
[ -z "$(MANWIDTH=80 man tcpdoctor 2>&1 >/dev/null)" ] || fail "man tcpdoctor warns"
bash -n /usr/share/bash-completion/completions/tcpdoctor
[ -f /usr/share/zsh/vendor-completions/_tcpdoctor ] && [ -f /usr/share/fish/vendor_completions.d/tcpdoctor.fish ] \
  || fail "zsh or fish completions not installed"
[ -f /usr/share/tcpdoctor/schema/analyze.json ] || fail "the JSON Schemas are not installed"
[ -f /lib/systemd/system/tcpdoctor-watch.service ] && [ -f /etc/default/tcpdoctor ] || fail "the unit or its defaults are missing"
grep -q 'License: Apache-2.0' /usr/share/doc/tcpdoctor/copyright && grep -q 'License: MIT' /usr/share/doc/tcpdoctor/copyright \
  || fail "copyright lacks a licence"
dpkg --purge tcpdoctor >/dev/null
trap - EXIT
[ -e /usr/bin/tcpdoctor ] && fail "/usr/bin/tcpdoctor left after dpkg --purge"
[ -e /etc/default/tcpdoctor ] && fail "/etc/default/tcpdoctor left after dpkg --purge"
echo ".deb: ok (installed, ran, purged)"
