#!/usr/bin/env python3
"""Rewrites a .cu file into C++ for the CPU emulation (cuda_emu.h): kernel launches
`k<<<g, b, smem, s>>>(args)` become `emu::launch(k, g, b, smem, s)(args)` and
`extern __shared__ T name[];` becomes a pointer to the launch's dynamic shared memory."""
import re, sys
src = open(sys.argv[1]).read()
src = re.sub(r'([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.+?)>>>\s*\(', r'emu::launch(\1, \2)(', src, flags=re.S)
src = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;', r'\1 *\2 = (\1 *)emu::dyn_smem();', src)
open(sys.argv[2], 'w').write(src)
