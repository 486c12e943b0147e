"""The TVM backend's option table, apart from the backend, which imports TVM at its top.

`compile --backend-option tvm.tune=bogus` (or a misspelt option, or --tuning-db without
tune=metaschedule) is checked against this table before anything is built; with the table on
TVMBackend the check imported TVM, and torch through it where installed, and the user waited
3-5 s for a one-line refusal (issue 53).  Only an `mcpu` value still needs TVM: LLVM is what
knows CPU names.  The registry hands this class to option checks (registry.options_class);
TVMBackend inherits it, so the table is written once."""

from __future__ import annotations

from ..backend import Backend
from ..options import Option, as_bool


class TVMOptions(Backend):
    name = "tvm"
    TUNERS = ("none", "metaschedule")
    #: Where records live changes no price: not part of cost-cache keys (Backend.priced_options).
    UNPRICED_OPTIONS = ("tuning_db", "cross")

    OPTIONS = (
        Option("tune", "choice", "MetaSchedule tuning of each partition (docs/tuning.md)",
               choices=TUNERS),
        Option("trials", "int", "MetaSchedule trials per partition", minimum=1),
        Option("tune_budget", "int", "MetaSchedule trials this backend may spend in all", minimum=0),
        Option("tuning_db", "str", "directory of the tuning database"),
        Option("mcpu", "str", "LLVM -mcpu (default: generic x86-64 untuned, 'native' = this "
               "CPU with tune=metaschedule)"),
        Option("cross", "bool", "1: the code is for another machine; an mcpu this CPU cannot "
               "run is built, not refused (run refuses it here)"),
    )

    @classmethod
    def combination_problem(cls, options: dict) -> tuple[str, str] | None:
        if str(options.get("tune", "none")) == "metaschedule":
            return None
        lone = next((k for k in ("trials", "tune_budget", "tuning_db") if k in options), None)
        return (lone, "acts only with tune=metaschedule: nothing is tuned without it (add "
                "--backend-option tvm.tune=metaschedule)") if lone else None

    @classmethod
    def host_problem(cls, options: dict) -> str | None:
        """An mcpu whose instructions this CPU lacks built fine, and `run` then died with
        "Illegal instruction" (issue 36): refused unless the build is declared a cross-build."""
        mcpu = str(options.get("mcpu", "")).strip()
        if mcpu in ("", "native") or as_bool(options.get("cross", False)):
            return None
        from .tvm_host import missing_features
        from .tvm_tuning import make_target  # TVM's Target: only for an mcpu to judge

        missing = missing_features(make_target(mcpu))
        if not missing:
            return None
        return (f"option mcpu={mcpu}: this CPU lacks {', '.join(missing)}, so its code would "
                "stop with an illegal instruction here; to build for another machine add "
                "--backend-option tvm.cross=1")

    @classmethod
    def option_problem(cls, name: str, value) -> str | None:
        """The table's check, and for `mcpu` LLVM's own list of CPU names."""
        why = super().option_problem(name, value)
        if why is None and name == "mcpu":
            from .tvm_tuning import llvm_cpu_problem  # LLVM's list: TVM's import, here only

            why = llvm_cpu_problem(str(value).strip())
        return why

    @classmethod
    def takes_threads(cls) -> bool:
        return True  # through TVMRunner.set_threads, not an option (see Backend.takes_threads)
