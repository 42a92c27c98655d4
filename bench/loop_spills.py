#!/usr/bin/env python3
"""Innermost loops of refit's SIMD kernels that pass a vector through the stack.

A stack slot that one innermost loop both stores a vector register to and reads back is
an accumulator (or another value live across iterations) the compiler could not keep in
a register: its chain then waits on a store and a reload every iteration. A one-row
decode tile that loaded its 8 weight vectors before its FMAs needed 17 of AVX2's 16
registers, and ran at two thirds of its speed until the loads were interleaved
(bench/RESULTS.md, session 25). Loops that only read constants from the stack are not
listed: they cost a load, not a chain.

  bench/loop_spills.py [BINARY] [FUNCTION_REGEX]
    BINARY          default build/refit
    FUNCTION_REGEX  demangled names to look at; default the Highway targets and the
                    hand-written AVX2/AVX-512 kernels (N_AVX2, N_AVX3, _avx2, _avx512)

Prints one line per loop: stack slots carried, vector instructions, FMAs, address, and
the function. Scalar tail loops show up too (few vector instructions): read the
address in `objdump -d` before acting on a line.
"""
import re
import subprocess
import sys

binary = sys.argv[1] if len(sys.argv) > 1 else "build/refit"
wanted = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"N_AVX2|N_AVX3|_avx2|_avx512")

asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", binary], check=True,
                     capture_output=True, text=True).stdout
functions = {}
name = None
for line in asm.splitlines():
    header = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
    if header:
        name = header.group(2) if wanted.search(header.group(2)) else None
        if name:
            functions[name] = []
        continue
    insn = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
    if insn and name:
        functions[name].append((int(insn.group(1), 16), insn.group(2)))

slot = r"-?0x[0-9a-f]+\((?:%rsp|%rbp)\)"
rows = []
for function, insns in functions.items():
    if not insns:
        continue
    first = insns[0][0]
    loops = []
    for address, text in insns:
        jump = re.match(r"j\w+\s+([0-9a-f]+)", text)
        if jump and first <= int(jump.group(1), 16) <= address:
            loops.append((int(jump.group(1), 16), address))
    innermost = [l for l in loops
                 if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    for begin, end in innermost:
        body = [text for address, text in insns if begin <= address <= end]
        stored, loaded = set(), set()
        for text in body:
            store = re.match(r"v\w+\s+%[xyz]mm\d+,(" + slot + r")$", text)
            if store:
                stored.add(store.group(1))
            for use in re.finditer("(" + slot + "),", text):
                loaded.add(use.group(1))
        vector = sum(1 for text in body if re.search(r"%[xyz]mm", text))
        carried = stored & loaded
        if carried and vector >= 8:
            fmas = sum(1 for text in body if text.startswith("vfmadd"))
            rows.append((len(carried), vector, fmas, hex(begin), function[:150]))

print("carried  vector  fma  loop      function")
for row in sorted(rows, reverse=True):
    print("%7d  %6d  %3d  %-8s  %s" % row)
