"""Operations on a whole home or store: doctor, forget, export, import and migrate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.ops.doctor import run_doctor
    from memstrata.ops.export import export_memory, export_sessions
    from memstrata.ops.forget import forget, plan_forget
    from memstrata.ops.importing import import_source
    from memstrata.ops.migrate import migrate_home

__all__ = [
    "export_memory",
    "export_sessions",
    "forget",
    "import_source",
    "migrate_home",
    "plan_forget",
    "run_doctor",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "export_memory": "memstrata.ops.export",
        "export_sessions": "memstrata.ops.export",
        "forget": "memstrata.ops.forget",
        "import_source": "memstrata.ops.importing",
        "migrate_home": "memstrata.ops.migrate",
        "plan_forget": "memstrata.ops.forget",
        "run_doctor": "memstrata.ops.doctor",
    },
)
