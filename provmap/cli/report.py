"""`provmap report`: the self-contained HTML page of an artifact, with costs from a saved
profile or measured now.  Its own module because a profile read from a file must first be
shown to be of this artifact (a profile of another one would paint its costs on the wrong
nodes), a check `vendor` shares.
"""

from __future__ import annotations

from provmap.provenance.util.atomic import write_bytes_atomic
from provmap.provenance.util.errors import ProvmapError

from .common import note_needless_trust, only_with, read_json_file, say_progress
from .json_out import print_json


def _check_profile_is_of(profile: dict, path: str, mod, artifact: str) -> None:
    """A profile of another artifact would paint its costs on the wrong nodes without a word.
    Profiles carry the artifact's digest; older ones are checked by their partitions."""
    digest = profile.get("artifact_digest")
    parts = [(p.get("partition"), p.get("backend")) for p in profile["partitions"]
             if isinstance(p, dict)]
    mine = [(m.id, m.backend) for m in mod.partitions]
    if (digest and digest != mod.artifact.digest) or (not digest and parts != mine):
        raise ProvmapError(f"{path}: a profile of another artifact (digest "
                           f"{(digest or 'not recorded')[:12]}, {len(parts)} partition(s)), "
                           "not of "
                           f"{artifact} "
                           f"(digest {mod.artifact.digest[:12]}); profile this artifact, or use "
                           "--measure")


def cmd_report(args) -> int:
    from provmap.runtime_module.module import load
    from provmap.workbench.report_html import render

    only_with(args, "--measure", args.measure, ("--repeats", args.repeats is not None),
               ("--trust", args.trust))
    args.repeats = 10 if args.repeats is None else args.repeats
    profile = None
    if args.profile and args.measure:
        raise ProvmapError("give either --profile FILE (saved costs) or --measure (profile "
                           "now), not both")
    if args.profile:
        from provmap.runtime_module.artifact_schema import check_profile

        profile = read_json_file(args.profile, "profile")
        if not isinstance(profile, dict) or not isinstance(profile.get("partitions"), list):
            raise ProvmapError(f"{args.profile}: not the output of `provmap profile --json`")
        check_profile(profile, args.profile)
    mod = load(args.artifact, runnable=bool(args.measure), trust=args.trust)
    note_needless_trust(mod, args.trust)
    if profile is not None:
        _check_profile_is_of(profile, args.profile, mod, args.artifact)
    if args.measure:
        from provmap.workbench.profile import profile_artifact

        profile = profile_artifact(mod, mod.random_inputs(0), repeats=args.repeats,
                                   progress=say_progress)
    page = render(mod, profile)
    write_bytes_atomic(args.output, page.encode())
    summary = {"report": args.output, "nodes": len(mod.lookup.map.nodes),
               "partitions": len(mod.partitions), "bytes": len(page.encode()),
               "costs": "measured" if profile else "none"}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.output} ({summary['nodes']} nodes, {summary['partitions']} "
              f"partition{'s' if summary['partitions'] != 1 else ''})")
    return 0
