#!/usr/bin/env bash
# Register spills of the CUDA kernels against a ratchet: compiles every src/backend/cuda/*.cu for
# sm_90a with the build's flags and ptxas -v (device code only, nothing is written to the tree),
# reads each kernel's spill stores and loads, and fails when a kernel spills more bytes than
# tools/cuda/spills_allowed.txt allows it (a kernel not listed: none). Why: ptxas spills silently --
# session 33 found the index scores' records kernel doing ~65 local loads / stores a 16-key step at
# 80 registers (its fix: 161 -> 134 us a launch); a change that brings spills back should say so.
#     bash tools/cuda/check_spills.sh            (needs nvcc; prints SKIPPED without it)
#     bash tools/cuda/check_spills.sh --update   (rewrites the allowances from this tree's spills)
# spills_allowed.txt: one kernel a line, "<mangled name> <store bytes> <load bytes>"; # comments,
# among them the nvcc release that wrote it: under another release (whose ptxas allocates otherwise)
# the differences are printed and do not fail.
set -u
cd "$(dirname "$0")/../.." || exit 2
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
if ! command -v nvcc >/dev/null; then
    echo "SKIPPED check_spills: nvcc not found"
    exit 0
fi
ALLOWED=tools/cuda/spills_allowed.txt
tmp=$(mktemp -d /tmp/di_spills_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
JOBS=${JOBS:-$(nproc)}
for f in src/backend/cuda/*.cu; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    b=$(basename "$f" .cu)
    # the flags of CMakeLists.txt's deepinfer_cuda target (Release), device code only
    nvcc -O3 -DNDEBUG -D_GNU_SOURCE -fmad=false -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude \
        -Xptxas -v -cubin -o "$tmp/$b.cubin" "$f" >"$tmp/$b.log" 2>&1 || echo "$f" >>"$tmp/failed" &
done
wait
if [ -s "$tmp/failed" ]; then
    echo "FAIL check_spills: these did not compile:"
    cat "$tmp/failed"
    for f in $(cat "$tmp/failed"); do grep -m5 error "$tmp/$(basename "$f" .cu).log"; done
    exit 1
fi
# kernel name, then its "N bytes spill stores, M bytes spill loads" line
cat "$tmp"/*.log | awk '
    /Compiling entry function/ { s = $0; sub(/.*function ./, "", s); sub(/. for .*/, "", s); name = s }
    /bytes spill stores/ && name != "" { print name, $5, $9; name = "" }' | sort -u >"$tmp/spills"
n=$(wc -l <"$tmp/spills")
release=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
if [ "${1:-}" = --update ]; then
    {
        echo "# Register spills each CUDA kernel may have (bytes of spill stores, loads), written by"
        echo "# tools/cuda/check_spills.sh --update from the tree's kernels; a kernel not listed may not spill."
        echo "# nvcc release $release"
        awk '$2 > 0 || $3 > 0' "$tmp/spills"
    } >"$ALLOWED"
    echo "check_spills: $(grep -vc '^#' "$ALLOWED") of $n kernels spill; allowances written to $ALLOWED"
    exit 0
fi
fail=0
while read -r name st ld; do
    read -r ast ald < <(awk -v k="$name" '$1 == k { print $2, $3 }' "$ALLOWED")
    ast=${ast:-0} ald=${ald:-0}
    if [ "$st" -gt "$ast" ] || [ "$ld" -gt "$ald" ]; then
        echo "FAIL check_spills: $(c++filt "$name" 2>/dev/null || echo "$name") spills $st B stored / $ld B loaded (allowed $ast / $ald)"
        fail=1
    fi
done <"$tmp/spills"
[ "$fail" = 0 ] && echo "ok   check_spills: $n kernels, none spills past $ALLOWED"
if [ "$fail" != 0 ] && ! grep -q "^# nvcc release $release\$" "$ALLOWED"; then
    echo "note check_spills: $ALLOWED was written under another nvcc release ($(grep -m1 '^# nvcc release' "$ALLOWED"); this is $release): not failed"
    exit 0
fi
exit $fail
