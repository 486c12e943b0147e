"""`provmap backends`: which backends this install has, and each one's options with their types
and ranges (the table `Backend.__init__` checks values against, runtime_module/options.py), so a
user learns `openvino.threads` takes an integer before a build refuses `abc`."""

from __future__ import annotations

from .term_text import term_safe
from .json_out import print_json


def cmd_backends(args) -> int:
    from provmap.runtime_module.backend import BackendError
    from provmap.runtime_module.registry import available_backends, backend_class

    rows = []
    for name in available_backends():
        try:
            cls = backend_class(name)
        except BackendError as e:  # a plugin that fails to import: said, not fatal
            rows.append({"name": name, "error": str(e), "options": []})
            continue
        specs = cls.option_specs()
        declared = set(cls.option_names()) | set(specs)
        rows.append({"name": name, "options": [
            {"name": k, "expects": specs[k].expected() if k in specs else "(the plugin checks)",
             "help": specs[k].help if k in specs else ""} for k in sorted(declared)]})
    if args.json:
        print_json({"backends": rows})
        return 0
    for r in rows:
        if "error" in r:
            # a plugin's name and its import error: another package's text, maybe multi-line
            print(term_safe(f"{r['name']}: unavailable: {r['error']}"))
        elif args.options:
            print(f"{r['name']}:")
            for o in r["options"]:
                print(f"  {o['name']:<18} {o['expects']}" + (f": {o['help']}" if o["help"] else ""))
        else:
            print(r["name"])
    return 0


def add_backends_command(sub) -> None:
    b = sub.add_parser("backends", help="the backends this install has; --options: each one's "
                       "options with types and ranges")
    b.add_argument("--options", action="store_true",
                   help="list each backend's options (BACKEND.OPTION=VALUE in --backend-option, "
                        "or BACKEND[OPTION=VALUE] in a strategy)")
    b.add_argument("--json", action="store_true", help="one JSON object on stdout")
    b.set_defaults(func=cmd_backends)



