#!/usr/bin/env bash
# Downloads (here, where apt works) the Debian packages of the CPU build's libraries -- cJSON,
# PCRE2, ICU and pkgconf -- into .sysroot/debs (git-ignored), for device runs on a machine that has
# CUDA but neither these libraries nor network access: name `.sysroot` in the device tool's `carry`,
# and tools/cuda/device_model_run.sh unpacks them into a private sysroot there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .sysroot/debs
grep -qx "/.sysroot/" .git/info/exclude 2>/dev/null || echo "/.sysroot/" >>.git/info/exclude
cd .sysroot/debs
apt-get download libcjson1 libcjson-dev libpcre2-8-0 libpcre2-dev libpcre2-16-0 libpcre2-32-0 \
    libpcre2-posix3 libicu72 libicu-dev icu-devtools pkgconf pkgconf-bin libpkgconf3
ls -la
