#!/usr/bin/env bash
# Fills fuzz/corpus/replay/ with seeds for the `replay` target:
#  - every `roce-observer synth` scenario cut to its first 50 frames (each seed < 64 KiB),
#  - a pcapng conversion of the demo seed,
#  - a copy of each capture under ../shared/captures/{real,erspan,negative} when that exists.
# The corpus directory is git-ignored: capture files are never committed.
# Needs tshark's editcap; PATH must reach bpf-linker (target/tools/bin, `cargo xtask setup`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
corpus="$here/corpus/replay"
frames="${SEED_FRAMES:-50}"
max=65536
export PATH="$root/target/tools/bin:$PATH"

command -v editcap >/dev/null || { echo "seed.sh: editcap (tshark) is required" >&2; exit 1; }
mkdir -p "$corpus"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cd "$root"
cargo build -q -p roce-observer-cli
bin="$root/target/debug/roce-observer"

for name in $("$bin" synth --list | awk '{print $1}'); do
    "$bin" synth --scenario "$name" -o "$tmp/$name.pcap" 2>/dev/null
    editcap -F nsecpcap -r "$tmp/$name.pcap" "$tmp/$name-cut.pcap" "1-$frames"
    if [ "$(stat -c %s "$tmp/$name-cut.pcap")" -gt "$max" ]; then
        # Still too big: keep the first 64 KiB (the last record is cut, a seed in itself).
        head -c "$max" "$tmp/$name-cut.pcap" >"$corpus/synth-$name.pcap"
    else
        cp "$tmp/$name-cut.pcap" "$corpus/synth-$name.pcap"
    fi
done
editcap -F pcapng "$corpus/synth-demo.pcap" "$corpus/synth-demo.pcapng"

shared="$root/../shared/captures"
if [ -d "$shared" ]; then
    for sub in real erspan negative; do
        [ -d "$shared/$sub" ] || continue
        for f in "$shared/$sub"/*; do
            [ -f "$f" ] && cp "$f" "$corpus/shared-$sub-$(basename "$f")"
        done
    done
fi
chmod u+w "$corpus"/*
ls -l "$corpus" | awk 'NR > 1 { n++; s += $5 } END { printf "seed.sh: %d seeds, %d bytes in total\n", n, s }'
