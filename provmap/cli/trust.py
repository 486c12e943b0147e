"""`provmap trust`: the list of artifacts whose native code may run here (record, list, revoke,
prune).  The rules and the storage are provmap.runtime_module.trust's; docs/artifact.md."""

from __future__ import annotations

import argparse

import os

from provmap.provenance.util.errors import ProvmapError

from .term_text import term_safe
from .json_out import print_json


def _where(raw: bool = False) -> str:
    """The trust list's path, escaped for the terminal ($PROVMAP_TRUST is text from the
    environment) unless `raw` (JSON escapes itself)."""
    from provmap.runtime_module import trust

    return str(trust.trust_file()) if raw else term_safe(trust.trust_file())


def _record(path: str) -> int:
    from provmap.runtime_module import trust
    from provmap.runtime_module.artifact import read_artifact

    art = read_artifact(path)  # verified first: a damaged file is never trusted
    shown = term_safe(path)  # a received file's name: escape sequences in it retitled terminals
    native = trust.native_backends(art.manifest)
    if not native:
        every = sorted({p["backend"] for p in art.manifest["partitions"]})
        print(f"{shown}: needs no trust (its partitions run on {', '.join(every) or '-'}: model "
              f"files, no native code); nothing recorded (list: {_where()})")
        return 0
    added = trust.add_trusted(art.digest, path, how="trusted", backends=native)
    state = "recorded" if added else "already trusted"
    if not added and not trust.is_trusted(art.digest):
        raise ProvmapError(f"{shown}: could not write the trust list {_where()}")
    print(f"{shown}: {state} (digest {art.digest}; native code on {', '.join(native)}"
          f"; list: {_where()})")
    return 0


def _named(entry: dict, empty: str) -> str:
    """An entry's recorded path (or an old list's note), escaped: it is the name a received
    file had, someone else's text, read back from the list."""
    return term_safe(entry["path"] or entry["note"] or empty)


def _list(as_json: bool) -> int:
    from provmap.runtime_module import trust

    rows = trust.entries()
    for e in rows:
        e["stale"] = trust.stale_reason(e)
    if as_json:
        print_json({"list": _where(raw=True), "entries": rows})  # a list anyone could edit
        return 0
    print(f"{len(rows)} trusted artifact(s) in {_where()}")
    for e in rows:
        # Every field escaped, not only the path: the list is a file anyone could have edited.
        print(term_safe(f"{e['digest']}  {e['added'] or '-':25}  {e['how'] or '-':8}  "
                        f"{e['backends'] or '-':6}  {e['path'] or e['note'] or '-'}"
                        + (f"  [{e['stale']}]" if e["stale"] else "")))
    return 0


def cmd_trust(args) -> int:
    from provmap.runtime_module import trust

    chosen = [n for n, v in (("ARTIFACT", args.artifact), ("--list", args.list),
                             ("--revoke", args.revoke), ("--prune", args.prune)) if v]
    if len(chosen) != 1:
        raise ProvmapError("trust: give exactly one of ARTIFACT, --list, --revoke, --prune"
                           + (f" (got {', '.join(chosen)})" if chosen else ""))
    if args.json and not args.list:  # ignored silently, a script would parse plain text
        raise ProvmapError(f"trust: --json goes with --list (got {chosen[0]})")
    trust.check_store()  # a directory or someone's file: one line, and never written
    if args.artifact:
        return _record(args.artifact)
    if args.list:
        return _list(args.json)
    try:
        if args.revoke:
            try:
                gone = trust.revoke(args.revoke)
            except ValueError as e:
                raise ProvmapError(f"trust --revoke: {e}") from None
            if not gone:  # (the error line is escaped whole by dispatch)
                raise ProvmapError(f"trust --revoke {args.revoke}: no such entry in {_where()} "
                                   "(give an artifact file, a digest or a recorded path; "
                                   "`provmap trust --list` shows them)")
            for e in gone:
                print(f"revoked {e['digest']}  {_named(e, '')}".rstrip())
            return 0
        gone = trust.prune()
    except OSError as e:
        raise ProvmapError(f"trust: {_where()}: {e}") from None
    for e, why in gone:
        print(f"pruned {e['digest']}  {_named(e, '-')}  ({term_safe(why)})")
    print(f"{len(gone)} entr{'y' if len(gone) == 1 else 'ies'} pruned, "
          f"{len(trust.entries())} left in {_where()}")
    return 0


def add_trust_command(sub) -> None:
    env_default = "$PROVMAP_TRUST" if os.environ.get("PROVMAP_TRUST") else "default"
    t = sub.add_parser(
        "trust", help="record that you trust an artifact you received, so its native code (TVM "
        "partitions) may run here; list, revoke or prune the trust list (see docs/artifact.md)",
        description="Artifacts whose native code (TVM partitions: shared libraries) may run\n"
        "on this machine, one entry per artifact digest. Artifacts built here are\nrecorded as "
        "they are written; ONNX Runtime/OpenVINO partitions are model\nfiles and need no trust.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the paths must not wrap
        epilog=f"The list in use ({env_default}):\n  {_where()}\n\n"
        "It lives in $PROVMAP_TRUST, else\n  $XDG_CONFIG_HOME/provmap/trusted-artifacts.sqlite,"
        "\nelse\n  ~/.config/provmap/trusted-artifacts.sqlite.\nIt is an SQLite file; the "
        "text list of older provmap versions beside it\n(trusted-artifacts) is copied in on "
        "first use and left for them.")
    t.add_argument("artifact", nargs="?", help="the artifact to trust (after you decided you "
                   "trust where it came from)")
    t.add_argument("--list", action="store_true", help="print every entry: digest, when, how "
                   "(built here, trusted, migrated), backends, path, and whether its file is gone")
    t.add_argument("--json", action="store_true", help="with --list: as JSON")
    t.add_argument("--revoke", metavar="ART|DIGEST|PATH", help="remove the entry of an artifact "
                   "file, a digest (or a unique prefix of 8+ hex digits) or a recorded path")
    t.add_argument("--prune", action="store_true", help="remove entries whose file is gone, "
                   "now holds another artifact, or was never recorded (old lists)")
    t.set_defaults(func=cmd_trust)
