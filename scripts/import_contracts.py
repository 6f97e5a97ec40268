"""A custom import-linter contract: no package imports another package's private modules.

import-linter's own wildcards replace whole module names only (`sdk.*`, not `sdk._*`), so this contract
walks the import graph itself: an import from package A of any module of package B whose dotted path has
a part starting with `_` (`sdk._types`, `sdk.infra._files`) breaks it. Configured in pyproject.toml;
`lint-imports` finds this module because it puts the working directory on sys.path.
"""

from __future__ import annotations

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def _private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split(".")[1:])


class PrivateModulesContract(Contract):
    """Options: `packages`, the top-level packages whose private modules only they may import."""

    type_name = "private_modules"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        roots = set(self.packages)  # type: ignore[call-overload]
        broken = []
        for importer in sorted(graph.modules):
            top = importer.split(".")[0]
            if top not in roots:
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                other = imported.split(".")[0]
                if other in roots and other != top and _private(imported):
                    lines = graph.get_import_details(importer=importer, imported=imported)
                    where = ", ".join(f"l.{d['line_number']}" for d in lines) or "?"
                    broken.append(f"{importer} ({where}) imports {imported}")
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["broken"]:
            output.print_error(line, bold=False)
        output.new_line()
        output.print("Import the name from the package's public API instead (its __init__ __all__).")
