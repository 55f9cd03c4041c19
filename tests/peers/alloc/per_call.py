"""Allocations per call from two DHAT profiles of the same proxy (scripts/alloc-profile.sh).

Usage: per_call.py SHORT.json LONG.json CALLS

LONG made CALLS more calls than SHORT; everything else (start-up, the session, shutdown) is
the same, so the difference divided by CALLS is the cost of one call. Prints blocks and bytes
per call, then the call sites (the innermost frame in berth_proxy, else the innermost frame
outside the allocator and the standard library) that allocate most per call.
"""

import collections
import json
import re
import sys

LIBRARY = re.compile(
    r"^(alloc::|core::|std::|__rust|__rdl|malloc|realloc|calloc|memalign|hashbrown::|<alloc::"
    r"|<core::|<std::|<T as alloc|<\[|<str as|<&|<Box|<bytes::|bytes::|serde_json::value)"
)


def sites(path):
    profile = json.load(open(path))
    frames = profile["ftbl"]
    blocks, size = collections.Counter(), collections.Counter()
    for point in profile["pps"]:
        names = [re.sub(r"^0x[0-9A-Fa-f]+: ", "", frames[f]).split(" (in ")[0] for f in point["fs"]]
        own = next((n for n in names if "berth_proxy" in n), None)
        site = own or next((n for n in names if not LIBRARY.search(n)), "?")
        blocks[site] += point["tbk"]
        size[site] += point["tb"]
    return blocks, size


def main() -> None:
    short, long, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    (blocks_a, size_a), (blocks_b, size_b) = sites(short), sites(long)
    blocks = {k: blocks_b[k] - blocks_a.get(k, 0) for k in blocks_b}
    size = {k: size_b[k] - size_a.get(k, 0) for k in size_b}
    print(f"allocations per tools/call: {sum(blocks.values()) / calls:.1f}")
    print(f"bytes allocated per tools/call: {sum(size.values()) / calls:.0f}")
    print("top call sites, allocations per call:")
    for site, count in sorted(blocks.items(), key=lambda kv: -kv[1])[:25]:
        if count / calls >= 0.5:
            print(f"  {count / calls:6.1f}  {site[:150]}")


if __name__ == "__main__":
    main()
