"""The text form of the tile IR, jaxpr-like, with names given at print time::

{ kernel add(x:f32[?]*, y:f32[?]*, out:f32[?]*) TILE=1024
    a:i32[] = block_id[axis=0]                                  # add.py:5
    b:i64[] = convert[dtype=int64] a                            # add.py:6
    ...
}
"""

from __future__ import annotations

import itertools
import string

from .core import Block, Combine, Literal, Program, Var

_COMMENT_COLUMN = 64


def _names():
    for n in itertools.count(1):
        for chars in itertools.product(string.ascii_lowercase, repeat=n):
            yield "".join(chars)


class _Namer:
    def __init__(self, reserved=(), notes=None):
        self.names: dict[Var, str] = {}
        self.notes = notes or {}
        self.reserved = set(reserved)
        self.fresh = (n for n in _names() if n not in self.reserved)

    def define(self, var: Var, name: str | None = None) -> str:
        self.names[var] = name or next(self.fresh)
        return self.names[var]

    def use(self, atom) -> str:
        if isinstance(atom, Literal):
            value = atom.value.item() if hasattr(atom.value, "item") else atom.value
            return f"{value!r}:{atom.type}"
        return self.names.get(atom, "<undefined>")


def _param_text(value) -> str:
    if hasattr(value, "name") and hasattr(value, "short"):
        return value.name
    if isinstance(value, tuple):
        return "(" + ",".join(map(str, value)) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def _eqn_lines(eqn, namer, indent):
    pad = " " * indent
    params = {k: v for k, v in eqn.params.items() if not isinstance(v, (Block, Combine))}
    head = eqn.prim.name + ("[" + " ".join(f"{k}={_param_text(v)}" for k, v in params.items()) + "]" if params else "")
    args = " ".join(namer.use(a) for a in eqn.inputs)
    outs = " ".join(f"{namer.define(v)}:{v.type}" for v in eqn.outputs)
    text = f"{pad}{outs + ' = ' if outs else ''}{head}{' ' + args if args else ''}"
    if eqn.loc is not None:
        text = f"{text.ljust(_COMMENT_COLUMN)} # {eqn.loc}"
    lines = [text] + _note_lines(eqn.outputs, namer, pad)
    for name, sub in eqn.params.items():
        if isinstance(sub, (Block, Combine)):
            lines.extend(_block_lines(sub.body if isinstance(sub, Combine) else sub, namer, indent + 4, label=name))
    return lines


def _note_lines(variables, namer, pad):
    """``# name: note`` under an equation, for annotated values (e.g. their layouts); a note's
    further lines indented under its first."""
    lines = []
    for v in variables:
        if v in namer.notes:
            first, *rest = namer.notes[v].split("\n")
            lines += [f"{pad}  # {namer.names[v]}: {first}"] + [f"{pad}  #   {line}" for line in rest]
    return lines


def _block_lines(block: Block, namer, indent, label):
    pad = " " * indent
    params = " ".join(f"{namer.define(p)}:{p.type}" for p in block.params)
    lines = [f"{pad}{label}={{ lambda {params} ."] + _note_lines(block.params, namer, pad + "    ")
    for eqn in block.eqns:
        lines.extend(_eqn_lines(eqn, namer, indent + 4))
    lines.append(f"{pad}  in ({' '.join(namer.use(r) for r in block.results)}) }}")
    return lines


def format_program(program: Program, notes: dict | None = None) -> str:
    """The whole kernel as text; ``notes`` adds a comment line under each annotated value."""
    namer = _Namer(reserved=program.arg_names, notes=notes)
    args = ", ".join(f"{namer.define(p, n)}:{p.type}" for p, n in zip(program.body.params, program.arg_names))
    consts = " ".join(f"{k}={v!r}" for k, v in program.constants.items())
    lines = [f"{{ kernel {program.name}({args}){' ' + consts if consts else ''}"]
    for eqn in program.body.eqns:
        lines.extend(_eqn_lines(eqn, namer, 4))
    lines.append("}")
    return "\n".join(lines)
