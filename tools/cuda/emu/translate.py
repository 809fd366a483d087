#!/usr/bin/env python3
"""Rewrites a .cu file into C++ for the CPU emulation (cuda_emu.h): kernel launches
`k<<<g, b, smem, s>>>(args)` become `emu::launch(k, g, b, smem, s)(args)`,
`extern __shared__ T name[];` becomes a pointer to the block's dynamic shared memory, and each
`__shared__ T a[N], *b;` a reference to the block's own storage of that declaration
(emu::cta_shared, keyed by a static of the declaration: a template's instantiations apart), so
that the blocks of a cluster, which run at once, each have their own."""
import re, sys
src = open(sys.argv[1]).read()
src = re.sub(r'([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.+?)>>>\s*\(', r'emu::launch(\1, \2)(', src, flags=re.S)
src = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;', r'\1 *\2 = (\1 *)emu::dyn_smem();', src)
n_keys = 0


def shared_decl(m):
    """`__shared__ BASE d1, d2;` -> per-declarator references into the block's shared storage"""
    global n_keys
    parts = m.group(1).split(',')
    first = re.match(r'(.*?)(\**)\s*(\w+)\s*((?:\[[^\]]*\])*)\s*$', parts[0], re.S)
    if not first:
        sys.exit(f"translate.py: cannot read the shared declaration `{m.group(0)}`")
    base = first.group(1)
    out = []
    for k, part in enumerate(parts):
        d = first if k == 0 else re.match(r'\s*(\**)\s*(\w+)\s*((?:\[[^\]]*\])*)\s*$', part)
        if not d:
            sys.exit(f"translate.py: cannot read the shared declaration `{m.group(0)}`")
        stars, name, dims = d.groups()[-3:]
        n_keys += 1
        out.append(f'static char emu_smem_key_{n_keys}; '
                   f'auto &{name} = emu::cta_shared<{base}{stars}{dims}>(&emu_smem_key_{n_keys});')
    return ' '.join(out)


src = re.sub(r'(?<![\w])__shared__\s+([^;{}()]+);', shared_decl, src)
open(sys.argv[2], 'w').write(src)
