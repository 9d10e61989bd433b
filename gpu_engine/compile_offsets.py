"""The compile check's (gpu_engine.compile_check) int32-offset check on KV-cache pointers, read from a
kernel's TTIR.
"""

from __future__ import annotations

import re

_DEF = re.compile(r"^\s*(%[\w.#-]+)(?::\d+)? = ([\w.]+)\b(.*)$")
_NAME = re.compile(r"%[\w.#-]+")
_ITER_ARG = re.compile(r"(%[\w.#-]+) = (%[\w.#-]+)")
BOUNDED_OPS = {"arith.constant", "tt.make_range"}  # values fixed at compile time


def int32_cache_offsets(ttir: str, cache_args: list[str]) -> list[str]:
    """Offsets into a KV cache that may be computed in 32 bits: one line of TTIR each.

    A cache holds more than 2^31 elements on a large GPU (block_id * block stride passes it), so any offset
    arithmetic that can reach that size must be 64-bit. Sound check on the TTIR (values named after the
    Python variables, before any optimisation): for every `tt.addptr` whose pointer derives from a cache
    argument (`*cache_ptr`, through splat/broadcast/addptr/loop-carried values),
    (a) the offset is i64, or an i32 computed from constants and tl.arange alone (bounded by constexprs);
    (b) no i32 `arith.muli` in the offset's backward slice takes an operand that derives from a `stride*`
        argument: strides are what scale an index into an element offset, so a 32-bit product with one can
        overflow before a later widening.
    Conservative: a bounded 32-bit product (head index * head stride) is flagged too; the kernels widen
    those, at the cost of a few 64-bit multiplies per tile.
    """
    args = set(re.findall(r"(%[\w.#-]+): [^ ]", ttir.split("tt.func", 1)[1].split("\n", 1)[0]))
    lines = [re.sub(r"\s+loc\(.*$", "", line) for line in ttir.splitlines()]
    defs: dict[str, tuple[str, list[str], str]] = {}  # name -> (op, operands, text)
    aliases: dict[str, str] = {}  # loop-carried block argument -> its initial value
    for line in lines:
        for block_arg, init in _ITER_ARG.findall(line.split("iter_args", 1)[1]) if "iter_args" in line else []:
            aliases[block_arg] = init
        m = _DEF.match(line)
        if m:
            rest = m[3].split(" : ", 1)[0] if m[2] != "scf.for" else ""
            defs[m[1]] = (m[2], _NAME.findall(rest), line)
    derived = set(cache_args and [f"%{a}" for a in cache_args])
    for _ in range(3):  # loop-carried pointers may need a second pass
        for name, (op, operands, text) in defs.items():
            if "!tt.ptr" in text.split(" : ")[-1] and any(o in derived for o in operands):
                derived.add(name)
        derived |= {b for b, init in aliases.items() if init in derived}

    def slice_of(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo += defs[n][1] if n in defs else ([aliases[n]] if n in aliases else [])
        return seen

    def from_stride(name: str) -> bool:
        return any(n in args and n.lstrip("%").startswith("stride") for n in slice_of(name))

    findings = []
    for name, (op, operands, text) in defs.items():
        if op != "tt.addptr" or operands[0] not in derived:
            continue
        offset = operands[1]
        offset_type = text.split(" : ")[-1].split(",")[-1].strip()
        sliced = slice_of(offset)
        if offset_type.endswith(("i32", "xi32>")):
            leaves_ok = all(n in defs and (defs[n][0] in BOUNDED_OPS or defs[n][1]) for n in sliced)
            if not leaves_ok:
                findings.append(f"32-bit runtime offset: {text.strip()}")
                continue
        for n in sliced:
            d_op, d_operands, d_text = defs.get(n, ("", [], ""))
            if d_op == "arith.muli" and re.search(r"(\bi32|xi32>)$", d_text) and any(map(from_stride, d_operands)):
                findings.append(f"32-bit stride product: {d_text.strip()}")
    return sorted(set(findings))
