"""compile and the files it records into (the trust list, the cost cache): a build whose native
code cannot be recorded is said, not silent.

`PROVMAP_TRUST` naming a text file of the user's made compile skip recording its build, and `run`
then refused the user's own artifact (issue 36).  The rule (docs/security.md): a strategy that
names a native-code backend (TVM) is refused before the build while the list is unusable; any
other build whose artifact ends up holding native code that is not recorded gets one warning
naming the list and what to do."""

from __future__ import annotations

import os

from provmap.provenance.util.errors import ProvmapError


def refuse_unusable_trust_list(strategy) -> None:
    """Before the build: a named native backend needs a list to record the build in."""
    from provmap.runtime_module import trust

    native = [b.name for b in strategy.used if trust.loads_native_code(b.base)]
    if not native:
        return
    try:
        trust.check_store()
    except trust.TrustStoreError as e:
        raise ProvmapError(f"{e} (compile records builds with native code ({', '.join(native)}) "
                           "there, so `run` trusts them; nothing was built)") from None


def refuse_unusable_cache(given) -> None:
    """Before the search: a cost cache path that is a directory (or under a file) failed only
    once the search had started, as "unable to open database file" (nu16 L2); said as the trust
    list says it."""
    from pathlib import Path

    from provmap.provenance.util.own_paths import cost_cache_path

    path = Path(given).expanduser() if given else cost_cache_path()
    where = "--cache" if given else "PROVMAP_CACHE" if os.environ.get("PROVMAP_CACHE") else None
    what = f"the cost cache {path}"
    set_it = f"; set {where} to a file (it is created on first use)" if where else ""
    if path.is_dir():
        raise ProvmapError(f"{what} is a directory{set_it}; nothing was built")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ProvmapError(f"{what} lies under {parent}, which is not a directory{set_it}; "
                           "nothing was built")


def unrecorded_warning(art, path) -> str | None:
    """After the build: why its native code is not in the trust list, if it is not."""
    from provmap.runtime_module import trust

    native = trust.native_backends(art.manifest)
    if not native or trust.is_trusted(art.digest):
        return None
    why = ""
    try:
        trust.check_store()
    except trust.TrustStoreError as e:
        why = f": {e}"
    return (f"{path} holds native code ({', '.join(native)}) but could not be recorded in the "
            f"trust list {trust.trust_file()}{why}; `run` needs --trust or `provmap trust "
            f"{path}` until the list is fixed")
