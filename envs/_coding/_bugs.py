"""Deterministic, AST-based bug injectors: turn a correct Python module into a buggy one with a known fix.

Each injector lists its *sites* in a module (the places it can change, in source order) and applies
one of them as a minimal text edit: only the characters of the changed operator, constant, operand or
block move, so the rest of the file (comments, quotes, formatting) stays as the author wrote it and
the diff a model has to find is one line or a few. Only code at or after `start_line` is touched
(for HumanEval that is the canonical solution, never the prompt's docstring or helpers).

    injector            what it does (one site)
    off_by_one          an int constant in a range()/slice/index/comparison/arithmetic/literal -> n+1 or n-1;
                        a computed range() bound `range(n)` -> `range(n - 1)` (or + 1); `len(x)` -> `len(x) - 1`
                        (or + 1);
                        or a boundary comparison `<` <-> `<=`, `>` <-> `>=`
    wrong_operator      `+` <-> `-`, `*` -> `+`, `/` <-> `//`, `%` -> `//`, `**` -> `*` (also in `+=`),
                        `==` <-> `!=`, `in` <-> `not in`, `is` <-> `is not`, `<` <-> `>`, `<=` <-> `>=`,
                        `and` <-> `or`, a `str.join` separator `''` <-> `' '`
    swapped_branch      the bodies of an `if ...: A else: B` swapped, or `a if c else b` -> `b if c else a`
    negated_condition   the test of an `if`/`while`/conditional expression/comprehension `if` wrapped in `not (...)`
    missing_edge_case   a guard clause (`if c: return/raise/continue/break`) deleted, or the last operand
                        of an `and`/`or` condition dropped
    wrong_return        `return True` <-> `return False`, or `return x` -> `return y` (another local)
    dropped_call        `abs(x)`, `sorted(x)`, `int(x)`, ... -> `x`; `s.lower()`, `s.strip()`, ... -> `s`;
                        `sorted(x, key=k)` -> `sorted(x)` (also `reverse=`, `min`, `max`, `.sort`); `f(f(x))` -> `f(x)`

A `Mutation` carries the buggy module and its fix as an exact-string replacement (`fix_old` ->
`fix_new`, with enough context lines to be unique in the buggy file), which is what the coding
family's oracle applies through its `edit_file` tool.

Deliberately not here: whether a mutant is *observable* (an equivalent mutant passes every test);
the coding family's build step runs the tests and keeps only mutants that fail them.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["INJECTORS", "Mutation", "inject", "sites"]


@dataclass(frozen=True)
class Mutation:
    """One injected bug: the buggy module and the exact-string edit that fixes it."""

    injector: str
    #: Index of the applied site among `sites(source, injector)`.
    site: int
    #: 1-based line of the change in the buggy module.
    line: int
    #: What changed, for people: "changed `<` to `<=`".
    description: str
    source: str
    #: `fix_old` occurs exactly once in `source`; replacing it with `fix_new` gives back the original.
    fix_old: str
    fix_new: str


@dataclass(frozen=True)
class _Site:
    """A text edit in the original source: replace [start, end) (character offsets) with `text`."""

    start: int
    end: int
    text: str
    description: str


class _Text:
    """Maps AST positions (1-based line, UTF-8 byte column) to character offsets in the source."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.line_start = [0]
        for ln in self.lines:
            self.line_start.append(self.line_start[-1] + len(ln))

    def offset(self, lineno: int, col_byte: int) -> int:
        line = self.lines[lineno - 1]
        return self.line_start[lineno - 1] + len(line.encode("utf-8")[:col_byte].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def seg(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.source[a:b]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Character span of whole lines first..last (1-based, inclusive, newline of `last` included)."""
        return self.line_start[first - 1], self.line_start[last]

    def gap(self, left: ast.AST, right: ast.AST) -> tuple[int, int]:
        """Span between the end of `left` and the start of `right` (where an operator token sits)."""
        return self.span(left)[1], self.span(right)[0]


def _token_in_gap(t: _Text, left: ast.AST, right: ast.AST, token: str, new: str, what: str) -> _Site | None:
    """Replace the operator `token` found between `left` and `right` (outside parentheses' contents)."""
    a, b = t.gap(left, right)
    gap = t.source[a:b]
    # The gap holds the operator, spaces, maybe parentheses or a line continuation; find the token as a word.
    idx = _find_token(gap, token)
    if idx < 0:
        return None
    return _Site(a + idx, a + idx + len(token), new, f"changed `{token}` to `{new}` {what}".strip())


def _find_token(gap: str, token: str) -> int:
    start = 0
    while True:
        i = gap.find(token, start)
        if i < 0:
            return -1
        before = gap[i - 1] if i > 0 else " "
        after = gap[i + len(token)] if i + len(token) < len(gap) else " "
        word = token[0].isalpha()
        sym_ok = not word and before not in "<>=!*/%+-" and after not in "<>=*/"
        word_ok = word and not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_")
        if sym_ok or word_ok:
            return i
        start = i + 1


_BINOP_TOKEN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
                ast.Pow: "**"}
_BINOP_SWAP = {"+": "-", "-": "+", "*": "+", "/": "//", "//": "/", "%": "//", "**": "*"}
_CMP_TOKEN = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
              ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_CMP_WRONG = {"==": "!=", "!=": "==", "in": "not in", "not in": "in", "is": "is not", "is not": "is",
              "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_CMP_BOUNDARY = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_DROPPABLE_CALLS = ("abs", "sorted", "reversed", "int", "str", "round", "float", "set", "tuple")
_DROPPABLE_METHODS = ("lower", "upper", "strip", "lstrip", "rstrip", "copy", "title", "capitalize", "swapcase")
_KEYED = ("sorted", "sort", "min", "max")
_ATOMS = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Tuple, ast.Dict, ast.Set,
          ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr)


class _Walker:
    """Collects the nodes of the module at or after `start_line`, with their parents."""

    def __init__(self, tree: ast.Module, start_line: int) -> None:
        self.parent: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = []
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        for node in ast.walk(tree):
            if getattr(node, "lineno", 0) >= start_line and getattr(node, "end_lineno", None) is not None:
                self.nodes.append(node)
        self.nodes.sort(key=lambda n: (n.lineno, n.col_offset, type(n).__name__))  # type: ignore[attr-defined]

    def of(self, kind: type | tuple[type, ...]) -> Iterator[ast.AST]:
        return (n for n in self.nodes if isinstance(n, kind))

    def function_of(self, node: ast.AST) -> ast.FunctionDef | None:
        p = self.parent.get(node)
        while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            p = self.parent.get(p)
        return p if isinstance(p, ast.FunctionDef) else None


def _off_by_one(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    for node in w.of((ast.Constant, ast.Compare, ast.Call)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
            # len(xs) -> len(xs) - 1 or + 1, the textbook off-by-one
            delta = rng.choice(("- 1", "+ 1"))
            a, b = t.span(node)
            seg = t.source[a:b]
            p = w.parent.get(node)
            new = f"({seg} {delta})" if isinstance(p, (ast.BinOp, ast.UnaryOp, ast.Attribute, ast.Subscript)) else f"{seg} {delta}"
            out.append(_Site(a, b, new, f"changed `{seg}` to `{seg} {delta}`"))
            continue
        if isinstance(node, ast.Call):
            # range(stop) / range(start, stop[, step]) with a computed stop: stop -> stop - 1 or stop + 1
            if not (isinstance(node.func, ast.Name) and node.func.id == "range" and node.args and not node.keywords):
                continue
            stop = node.args[0] if len(node.args) == 1 else node.args[1]
            if isinstance(stop, (ast.Constant, ast.Starred)) or isinstance(stop, ast.UnaryOp):
                continue  # constants are the int-constant sites below
            delta = rng.choice(("- 1", "+ 1"))
            seg = t.seg(stop)
            a, b = t.span(stop)
            new = f"{seg} {delta}" if isinstance(stop, _ATOMS) else f"({seg}) {delta}"
            out.append(_Site(a, b, new, f"changed the bound `{seg}` of range() to `{new}`"))
            continue
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                tok = _CMP_TOKEN[type(op)]
                if tok in _CMP_BOUNDARY:
                    site = _token_in_gap(t, left, right, tok, _CMP_BOUNDARY[tok], "(boundary)")
                    if site:
                        out.append(site)
                left = right
            continue
        assert isinstance(node, ast.Constant)
        if type(node.value) is not int:
            continue
        p = w.parent.get(node)
        if isinstance(p, ast.UnaryOp):
            p = w.parent.get(p)
        in_range = isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "range"
        literal = isinstance(p, (ast.Dict, ast.List, ast.Tuple, ast.Set))
        if not (in_range or literal or isinstance(p, (ast.Slice, ast.Subscript, ast.Compare, ast.BinOp, ast.AugAssign))):
            continue
        bumped = node.value + rng.choice((1, -1))
        a, b = t.span(node)
        out.append(_Site(a, b, str(bumped), f"changed the constant {node.value} to {bumped}"))
    return out


def _wrong_operator(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    for node in w.of((ast.BinOp, ast.Compare, ast.BoolOp, ast.AugAssign, ast.Call)):
        if isinstance(node, ast.Call):
            f = node.func
            sep = f.value if isinstance(f, ast.Attribute) and f.attr == "join" else None
            if isinstance(sep, ast.Constant) and isinstance(sep.value, str) and len(node.args) == 1:
                a, b = t.span(sep)
                q = t.source[a]
                new_sep = f"{q} {q}" if sep.value == "" else f"{q}{q}"
                out.append(_Site(a, b, new_sep, f"changed the join separator {t.source[a:b]} to {new_sep}"))
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_TOKEN:
            tok = _BINOP_TOKEN[type(node.op)]
            site = _token_in_gap(t, node.left, node.right, tok, _BINOP_SWAP[tok], "")
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOP_TOKEN:
            tok = _BINOP_TOKEN[type(node.op)] + "="
            site = _token_in_gap(t, node.target, node.value, tok, _BINOP_SWAP[tok[:-1]] + "=", "")
        elif isinstance(node, ast.BoolOp) and len(node.values) >= 2:
            tok = "and" if isinstance(node.op, ast.And) else "or"
            site = _token_in_gap(t, node.values[0], node.values[1], tok, "or" if tok == "and" else "and", "")
        elif isinstance(node, ast.Compare):
            site = None
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                tok = _CMP_TOKEN[type(op)]
                site = _token_in_gap(t, left, right, tok, _CMP_WRONG[tok], "")
                if site:
                    break
                left = right
        else:
            site = None
        if site is not None:
            out.append(site)
    return out


def _indent_block(t: _Text, stmts: list[ast.stmt]) -> tuple[int, int]:
    return t.line_span(stmts[0].lineno, stmts[-1].end_lineno or stmts[-1].lineno)


def _swapped_branch(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    for node in w.of((ast.If, ast.IfExp)):
        if isinstance(node, ast.IfExp):
            body, test, orelse = t.seg(node.body), t.seg(node.test), t.seg(node.orelse)
            a, b = t.span(node)
            if t.source[a:b] == f"{body} if {test} else {orelse}":
                out.append(_Site(a, b, f"{orelse} if {test} else {body}", "swapped the branches of a conditional expression"))
            continue
        assert isinstance(node, ast.If)
        if not node.orelse or node.body[0].lineno == node.lineno:
            continue
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            first = t.lines[node.orelse[0].lineno - 1].lstrip()
            if first.startswith("elif"):
                continue
        ba, bb = _indent_block(t, node.body)
        oa, ob = _indent_block(t, node.orelse)
        between = t.source[bb:oa]
        if between.strip() != "else:" or ba >= bb or oa >= ob:
            continue
        body_txt, else_txt = t.source[ba:bb], t.source[oa:ob]
        if _indent(body_txt) != _indent(else_txt):
            continue
        out.append(_Site(ba, ob, else_txt + between + body_txt, f"swapped the branches of the `if` on line {node.lineno}"))
    return out


def _indent(block: str) -> str:
    first = block.splitlines()[0]
    return first[: len(first) - len(first.lstrip())]


def _negated_condition(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    tests: list[tuple[ast.AST, ast.expr]] = []
    for node in w.of((ast.If, ast.While, ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            tests += [(node, cond) for gen in node.generators for cond in gen.ifs]
        else:
            tests.append((node, node.test))  # type: ignore[attr-defined]
    for node, test in tests:
        a, b = t.span(test)
        seg = t.source[a:b]
        if "\n" in seg:
            continue
        new = f"not {seg}" if isinstance(test, _ATOMS) else f"not ({seg})"
        out.append(_Site(a, b, new, f"negated the condition on line {node.lineno}"))  # type: ignore[attr-defined]
    return out


def _missing_edge_case(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    for node in w.of((ast.If, ast.BoolOp)):
        if isinstance(node, ast.BoolOp):
            if len(node.values) < 2 or isinstance(w.parent.get(node), ast.BoolOp):
                continue
            a, _ = t.span(node.values[0])
            _, b = t.span(node.values[-2])
            _, end = t.span(node)
            kw = "and" if isinstance(node.op, ast.And) else "or"
            out.append(_Site(a, end, t.source[a:b], f"dropped the last `{kw}` operand of the condition on line {node.lineno}"))
            continue
        assert isinstance(node, ast.If)
        guard = (len(node.body) == 1 and isinstance(node.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break))
                 and not node.orelse)
        if not guard:
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        line = t.lines[first - 1]
        if not line.lstrip().startswith("if "):
            continue  # an `elif` guard: deleting it would orphan the chain
        parent = w.parent.get(node)
        siblings = _block_of(parent, node)
        a, b = t.line_span(first, last)
        text = "" if siblings is not None and len(siblings) > 1 else _indent(line) + "pass\n"
        out.append(_Site(a, b, text, f"deleted the guard clause on line {first}"))
    return out


def _block_of(parent: ast.AST | None, node: ast.AST) -> list[ast.stmt] | None:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and node in block:
            return block
    return None


def _local_names(fn: ast.FunctionDef) -> list[str]:
    names = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in names:
            names.append(n.id)
    return names


def _wrong_return(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    for node in w.of(ast.Return):
        assert isinstance(node, ast.Return)
        v = node.value
        if isinstance(v, ast.Constant) and type(v.value) is bool:
            a, b = t.span(v)
            out.append(_Site(a, b, str(not v.value), f"returned {not v.value} instead of {v.value} on line {node.lineno}"))
        elif isinstance(v, ast.Name):
            fn = w.function_of(node)
            others = [n for n in _local_names(fn) if n != v.id and n not in dir(builtins)] if fn else []
            if others:
                new = rng.choice(others)
                a, b = t.span(v)
                out.append(_Site(a, b, new, f"returned `{new}` instead of `{v.id}` on line {node.lineno}"))
    return out


def _dropped_call(t: _Text, w: _Walker, rng: random.Random) -> list[_Site]:
    out: list[_Site] = []
    module_fns = {n.name for n, p in w.parent.items() if isinstance(n, ast.FunctionDef) and isinstance(p, ast.Module)}
    for node in w.of(ast.Call):
        assert isinstance(node, ast.Call)
        a, b = t.span(node)
        f = node.func
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        key = [k for k in node.keywords if k.arg in ("key", "reverse")]
        if fname in _KEYED and key and not any(isinstance(x, ast.Starred) for x in node.args):
            kept = [t.seg(x) for x in node.args] + [t.seg(k) for k in node.keywords if k is not key[0]]
            new = f"{t.seg(f)}({', '.join(kept)})"
            out.append(_Site(a, b, new, f"dropped `{t.seg(key[0])}` from the call to `{fname}()` on line {node.lineno}"))
            continue
        if (isinstance(f, ast.Name) and f.id in module_fns and len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], ast.Call)):
            out.append(_Site(a, b, t.seg(node.args[0]), f"dropped the outer call to `{f.id}()` on line {node.lineno}"))
            continue
        if isinstance(f, ast.Name) and f.id in _DROPPABLE_CALLS and len(node.args) == 1 and not node.keywords:
            arg = node.args[0]
            if isinstance(arg, ast.Starred):
                continue
            seg = t.seg(arg)
            new = seg if isinstance(arg, _ATOMS) else f"({seg})"
            out.append(_Site(a, b, new, f"dropped the call to `{f.id}()` on line {node.lineno}"))
        elif isinstance(f, ast.Attribute) and f.attr in _DROPPABLE_METHODS and not node.args and not node.keywords:
            seg = t.seg(f.value)
            new = seg if isinstance(f.value, _ATOMS) else f"({seg})"
            out.append(_Site(a, b, new, f"dropped the call to `.{f.attr}()` on line {node.lineno}"))
    return out


_Injector = Callable[[_Text, _Walker, random.Random], list[_Site]]

#: name -> site finder, in the order tasks are generated.
INJECTORS: dict[str, _Injector] = {
    "off_by_one": _off_by_one,
    "wrong_operator": _wrong_operator,
    "swapped_branch": _swapped_branch,
    "negated_condition": _negated_condition,
    "missing_edge_case": _missing_edge_case,
    "wrong_return": _wrong_return,
    "dropped_call": _dropped_call,
}


def _site_list(source: str, injector: str, start_line: int) -> list[_Site]:
    if injector not in INJECTORS:
        raise ValueError(f"unknown bug injector {injector!r}; use one of: {', '.join(INJECTORS)}")
    tree = ast.parse(source)
    # The rng only picks among equally valid variants (n+1 or n-1, which local to return); seeding it
    # from the injector name keeps a site's edit the same however many sites come before it.
    rng = random.Random(f"{injector}:{source}")
    return INJECTORS[injector](_Text(source), _Walker(tree, start_line), rng)


def sites(source: str, injector: str, start_line: int = 1) -> list[str]:
    """Human-readable descriptions of every site `injector` can change at or after `start_line`."""
    return [s.description for s in _site_list(source, injector, start_line)]


def inject(source: str, injector: str, site: int, start_line: int = 1) -> Mutation:
    """Apply site number `site` of `injector` to `source`. Raises ValueError when the site does not exist
    or the edit does not change the program (same AST) or breaks its syntax."""
    found = _site_list(source, injector, start_line)
    if not 0 <= site < len(found):
        raise ValueError(f"{injector} has {len(found)} sites in this module, not site {site}")
    s = found[site]
    buggy = source[: s.start] + s.text + source[s.end :]
    try:
        new_tree = ast.parse(buggy)
    except SyntaxError as e:
        raise ValueError(f"{injector} site {site} does not parse: {e}") from None
    if ast.dump(new_tree) == ast.dump(ast.parse(source)):
        raise ValueError(f"{injector} site {site} does not change the program")
    line = source.count("\n", 0, s.start) + 1
    old, new = _fix(source, buggy)
    return Mutation(injector=injector, site=site, line=line, description=s.description, source=buggy,
                    fix_old=old, fix_new=new)


def _fix(original: str, buggy: str) -> tuple[str, str]:
    """The smallest whole-line replacement (buggy lines -> original lines) whose old text is unique in `buggy`."""
    a, b = original.splitlines(keepends=True), buggy.splitlines(keepends=True)
    ops = [op for op in difflib.SequenceMatcher(a=b, b=a, autojunk=False).get_opcodes() if op[0] != "equal"]
    b_lo, b_hi = ops[0][1], ops[-1][2]
    a_lo, a_hi = ops[0][3], ops[-1][4]
    ctx = 0
    while True:
        lo_b, hi_b = max(b_lo - ctx, 0), min(b_hi + ctx, len(b))
        old = "".join(b[lo_b:hi_b])
        if old and buggy.count(old) == 1:
            lo_a = a_lo - (b_lo - lo_b)
            hi_a = a_hi + (hi_b - b_hi)
            return old, "".join(a[lo_a:hi_a])
        if lo_b == 0 and hi_b == len(b):
            return buggy, original
        ctx += 1
