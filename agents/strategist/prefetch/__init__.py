"""Prefetching a loop-carried point-to-point exchange: software pipelining as a source rewrite.

A ring loop (ring attention, ring all-gather by hand) carries state that an exchange passes on:

    for step in range(world):
        if step:
            k, v = pass_along(k, v)        # send k, v on; receive the previous rank's
        out = attend(q, k, v)              # compute with what was received

Each iteration waits for its exchange before it computes, so communication never overlaps
compute. The state after iteration i's exchange is final for the rest of iteration i (nothing else
in the body writes it), so the exchange feeding iteration i + 1 can be issued right there, on a
side CUDA stream, and run while iteration i computes; iteration i + 1 takes its result:

    _kl_prefetch0 = _KloomPrefetch()
    for step in _kl_prefetch0.ahead(range(world)):
        if step:
            k, v = _kl_prefetch0.take(pass_along, k, v)
        if _kl_prefetch0.more and (_kl_prefetch0.upcoming):
            _kl_prefetch0.start(pass_along, k, v)
        out = attend(q, k, v)

``ahead`` iterates one element ahead, so the guard is evaluated for the next iteration's loop value:
the exchange still happens for exactly the iterations it did (``if step:`` -> i >= 1), each issued
one iteration earlier; the last iteration issues none and the first takes nothing prefetched (it
runs its exchange in place). Every rank issues the same exchanges in the same order as the
reference, and the loop may hold no other communication, so nothing can be reordered across ranks.

What the rewrite requires (else it leaves the loop alone), all read from the syntax tree:

- a ``for`` over ``range(...)`` with a plain name as its target, inside a function;
- one statement of its body, at the top level or alone in a top-level ``if`` with no ``else``,
  is ``A, B = F(A, B)`` (or ``A = F(A)``): the targets are exactly the arguments;
- ``F`` is a module-level function whose body performs point-to-point communication
  (``send``/``recv``/``isend``/``irecv``/``batch_isend_irecv``/``P2POp``, under any alias of
  ``torch.distributed``) and returns, in every ``return``, names it received into (fresh buffers,
  not its parameters);
- nothing else in the loop body writes the state: no assignment, ``del``, augmented assignment,
  subscript or attribute store, in-place method (``x.add_()``), ``out=``, distributed call, or
  module-level function that modifies the argument it is given;
- the guard reads only the loop variable, constants and names the loop body does not assign,
  through comparisons and arithmetic (no calls);
- the loop body has no other communication (distributed calls, or calls of functions that
  communicate), no ``break``, ``return`` or ``yield``, and no ``continue`` before the exchange.

At run time (``PREFETCH_HELPER``) on CUDA the side stream first waits for the compute stream (so it
sends finished data), the sent tensors are recorded on the side stream and the received ones on the
compute stream (so the caching allocator reuses neither early), and ``take`` makes the compute
stream wait for the side stream. Without CUDA (gloo on CPU) ``start`` runs the exchange at once,
synchronously, at the place where the GPU would issue it: the same values as the reference, in
the rewritten order, which is what CPU tests check.
"""

from __future__ import annotations

import ast

from ..embed import runtime_source
from .detect import ExchangeModule, functions_in, loop_exchange, walk_scope

#: The runtime a candidate carries, copied from ``runtime.py``.
PREFETCH_HELPER = runtime_source(f"{__name__}.runtime")



class _Upcoming(ast.NodeTransformer):
    def __init__(self, var: str, helper: str):
        self.var, self.helper = var, helper

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.var:
            return ast.Attribute(ast.Name(self.helper, ast.Load()), "upcoming", ast.Load())
        return node


def prefetch_exchange(source: str) -> tuple[str, int]:
    """The source with each pipelinable loop's exchange issued one iteration early through
    ``_KloomPrefetch``; returns it and the number of loops rewritten (0: the source unchanged).
    Only the loop header's iterable, the exchange's call and two inserted places change: the rest
    of the file keeps its text."""
    tree = ast.parse(source)
    module = ExchangeModule(tree)
    if not module.exchanges:
        return source, 0
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:  # col: UTF-8 bytes, as ast gives it
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    edits: list[tuple[int, int, str]] = []
    count = 0
    for function in functions_in(tree):
        if function.name in module.exchanges:
            continue
        for loop in (n for n in walk_scope(function) if isinstance(n, ast.For)):
            ex = loop_exchange(loop, function, module)
            if ex is None:
                continue
            body = loop.body
            # One statement per line where the rewrite inserts, and a body on its own lines.
            if body[0].lineno == loop.lineno or any(
                o is not ex.stmt and o.lineno <= ex.stmt.end_lineno and o.end_lineno >= ex.stmt.lineno for o in body
            ):
                continue
            helper = f"_kl_prefetch{count}"
            count += 1
            indent = lines[loop.lineno - 1][: len(lines[loop.lineno - 1]) - len(lines[loop.lineno - 1].lstrip())]
            body_line = lines[ex.stmt.lineno - 1]
            body_indent = body_line[: len(body_line) - len(body_line.lstrip())]
            step = body_indent[len(indent):] or "    "
            state = ", ".join(ex.state)
            # The helper, before the loop.
            edits.append((starts[loop.lineno - 1], starts[loop.lineno - 1], f"{indent}{helper} = _KloomPrefetch()\n"))
            # The loop runs one element ahead.
            a, b = offset(loop.iter.lineno, loop.iter.col_offset), offset(loop.iter.end_lineno, loop.iter.end_col_offset)
            edits.append((a, b, f"{helper}.ahead({source[a:b]})"))
            # The exchange takes what the previous iteration started.
            a, b = offset(ex.call.lineno, ex.call.col_offset), offset(ex.call.end_lineno, ex.call.end_col_offset)
            edits.append((a, b, f"{helper}.take({ex.fn}, {state})"))
            # And starts the next iteration's, under the guard evaluated for the next loop value.
            condition = f"{helper}.more"
            if ex.guard is not None:
                upcoming = _Upcoming(loop.target.id, helper).visit(ast.parse(ast.unparse(ex.guard), mode="eval").body)
                condition += f" and ({ast.unparse(upcoming)})"
            after = starts[ex.stmt.end_lineno]
            prefix = "" if source[:after].endswith("\n") else "\n"
            edits.append((after, after, f"{prefix}{body_indent}if {condition}:\n{body_indent}{step}{helper}.start({ex.fn}, {state})\n"))
    if not count:
        return source, 0
    out = source
    # From the end, and at one place the later edit first, so that the earlier one ends up before it.
    for _, a, b, text in sorted(((i, a, b, t) for i, (a, b, t) in enumerate(edits)), key=lambda e: (e[1], e[2], e[0]), reverse=True):
        out = out[:a] + text + out[b:]
    ast.parse(out)  # the rewrite keeps the file valid
    return out, count
