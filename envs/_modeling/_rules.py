"""What a step's code may do, checked before it runs: model with Blender, load nothing from files.

The task is to build the model with Blender's operations. Geometry read from a file — an importer
(`bpy.ops.wm.stl_import`, `bpy.ops.import_mesh.*`), another .blend (`open_mainfile`, append, link,
`bpy.data.libraries.load`), a mesh cache, an Import geometry node — is not the agent's modeling, so a
step that reaches for one is refused with the reason, and is not run (the model is unchanged). The
same check runs again when the grader replays the steps.

The check is on the parsed code (`ast`), an allowlist where one is possible:
  * imports: only bpy, bmesh, mathutils, math, random, itertools, functools, collections, statistics;
  * `bpy.ops.<group>`: only mesh, object, transform, curve (written out: `ops = bpy.ops` is refused);
  * names: no open, eval, exec, compile, __import__, getattr/setattr/delattr, vars, globals, locals,
    breakpoint, input (no file access, no dynamic lookups that would hide the rest);
  * attributes and keyword arguments: none starting with "_" (dunders and private internals), none naming
    a loader or a file (anything containing "import", "load", "filepath", "directory", "library"/"libraries",
    "cache_file", "execfile", "as_module", "script", "preset", "external", "asset") and not `bpy.data.texts`;
  * string constants: none naming the file-reading modifiers and nodes (MESH_CACHE,
    MESH_SEQUENCE_CACHE, GeometryNodeImport…).

What it cannot do: prove anything about code it cannot see coming (a check on text can be evaded by
a determined program). That is why grading does not rest on it: the grader replays the steps in a clean
sandbox and exports the model in a fresh one that holds only state.blend, so geometry that depends on a
file at evaluation time is gone, and no file the steps did not make exists there (see `_verify.py`).
What remains possible is geometry typed into the code itself (`from_pydata`), which is modeling too.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

__all__ = ["ALLOWED_MODULES", "ALLOWED_OPS", "refusal"]

ALLOWED_MODULES = frozenset({"bpy", "bmesh", "mathutils", "math", "random", "itertools", "functools", "collections",
                             "statistics"})
ALLOWED_OPS = frozenset({"mesh", "object", "transform", "curve"})
_BANNED_NAMES = frozenset({"open", "eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "vars",
                           "globals", "locals", "breakpoint", "input", "__builtins__", "__loader__", "__spec__"})
_BANNED_ATTR = re.compile(r"import|load|filepath|directory|librar|cache_file|execfile|as_module|script|preset|"
                          r"external|asset", re.IGNORECASE)
_BANNED_STRINGS = re.compile(r"MESH_CACHE|MESH_SEQUENCE_CACHE|GeometryNodeImport|NodeImport", re.IGNORECASE)


def _is_bpy_ops(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "ops" and isinstance(node.value, ast.Name)
            and node.value.id == "bpy")


def refusal(code: str) -> Optional[str]:
    """Why `code` may not run (one sentence naming the line), or None when it may."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return f"syntax error on line {e.lineno}: {e.msg}"
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in ALLOWED_MODULES:
                    return f"line {line}: `import {alias.name}` is not allowed; steps may import only " \
                           f"{', '.join(sorted(ALLOWED_MODULES))}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] not in ALLOWED_MODULES:
                return f"line {line}: `from {module} import …` is not allowed; steps may import only " \
                       f"{', '.join(sorted(ALLOWED_MODULES))}"
            if module == "bpy" and any(a.name in ("ops", "utils", "app") for a in node.names):
                return f"line {line}: import `bpy.ops` groups as `bpy.ops.mesh.…` written out, not with `from bpy import`"
        elif isinstance(node, ast.Name) and node.id in _BANNED_NAMES:
            return f"line {line}: `{node.id}` is not allowed in a step (no file access or dynamic lookups)"
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                return f"line {line}: `.{node.attr}`: attributes starting with '_' are not allowed"
            if _BANNED_ATTR.search(node.attr) or node.attr == "texts":
                return f"line {line}: `.{node.attr}` loads or runs files; build the model with Blender's operations " \
                       "instead (importing or linking geometry is not allowed)"
            if _is_bpy_ops(node):
                parent = parents.get(node)
                group = parent.attr if isinstance(parent, ast.Attribute) and parent.value is node else None
                if group not in ALLOWED_OPS:
                    shown = f"bpy.ops.{group}" if group else "bpy.ops on its own"
                    return f"line {line}: `{shown}` is not allowed; steps may use bpy.ops." \
                           f"{{{', '.join(sorted(ALLOWED_OPS))}}}.<operator>(…)"
        elif isinstance(node, ast.keyword) and node.arg and _BANNED_ATTR.search(node.arg):
            return f"line {line}: the argument `{node.arg}=` names a file; build the model with Blender's operations " \
                   "instead (importing or linking geometry is not allowed)"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _BANNED_STRINGS.search(node.value):
            return f"line {line}: {node.value!r} reads geometry from a file; build the model with Blender's operations"
    return None
