#!/usr/bin/env bash
# tcpdoctor's whole test suite: installs what the tests need from Debian's
# packages when it is missing, then runs cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have tshark || need+=(tshark)
have tcpdump || need+=(tcpdump)
have nginx || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
have nft || [ -x /usr/sbin/nft ] || need+=(nftables)
have ip || [ -x /usr/sbin/ip ] || need+=(iproute2)
have javac || need+=(default-jdk-headless)
have ab || need+=(apache2-utils)
have python3 || need+=(python3)
have node || need+=(nodejs)
have strace || need+=(strace)
have ping || need+=(iputils-ping)
have capsh && have setcap || need+=(libcap2-bin)
have go || [ -x /usr/local/go/bin/go ] || need+=(golang-go)
have chromium || need+=(chromium)
have promtool || need+=(prometheus)
have zsh || need+=(zsh)
have fish || need+=(fish)
have groff || need+=(groff-base)
have man || need+=(man-db)
have systemd-analyze || need+=(systemd)
have bpftool || [ -x /usr/sbin/bpftool ] || need+=(bpftool)
if [ ${#need[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections 2>/dev/null || true
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cargo test --all-targets "$@"
