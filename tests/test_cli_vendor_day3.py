"""Issue 36, third new-user check on a fresh clone: outputs through links, option values the
manifest must accept, native code the host cannot run, the cost cache as an output, and counts
that must agree; each driven through the real CLI (a fresh process, as a user types it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cli_runner import one_error, provmap

pytestmark = pytest.mark.usefixtures("own_config")


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


def test_an_output_through_a_link_replaces_the_target_never_the_link(tmp_path, artifact):
    """`compile -o lk.provmap` and `run -o lk.npz` replaced the link itself with a regular file
    (as root, `report -o /dev/stdout > f` replaced the system's /dev/stdout)."""
    target, link = tmp_path / "target.npz", tmp_path / "lk.npz"
    target.write_bytes(b"old")
    link.symlink_to(target.name)
    r = provmap("run", artifact, "-o", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes()[:2] == b"PK"  # the .npz went to the target

    art_target, art_link = tmp_path / "real.provmap", tmp_path / "lk.provmap"
    art_link.symlink_to(art_target)  # a dangling link: its target is a new path
    r = provmap("compile", "bundled:squeezenet", "-o", art_link, "--strategy",
                "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    assert art_link.is_symlink() and art_target.is_file()

    report = tmp_path / "report.html"
    with open(report, "w") as out:  # `report -o /dev/stdout > report.html`
        r = subprocess.run([sys.executable, "-m", "provmap.cli.main", "report", str(artifact),
                            "-o", "/dev/stdout"], stdout=out, stderr=subprocess.PIPE, text=True,
                           timeout=600)
    assert r.returncode == 0, r.stderr
    assert os.path.islink("/dev/stdout") and report.read_text().lstrip().startswith("<")


def test_a_link_to_a_fifo_or_device_is_refused_and_left_alone(tmp_path, artifact):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/null"):
        link = tmp_path / "lk"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        one_error(provmap("run", artifact, "-o", link), f"{link}: a link to a device or "
                  "special file")
        assert link.is_symlink()
    r = provmap("report", artifact, "-o", "/dev/stdout")  # stdout is a pipe here
    one_error(r, "/dev/stdout: a link to a device or special file")
    assert os.path.islink("/dev/stdout")


def _small_model(path):
    """Relu -> Add on a [1, 8] input: enough for a backend to build, quick to compile."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["y", "y"], ["z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_threads_0_compiles_runs_and_inspects(tmp_path, backend):
    """The option table says 0 = the library's default; the manifest schema said 1..4096, so
    `run` and `inspect` refused the artifact `compile` had just written."""
    model, art = _small_model(tmp_path / "m.onnx"), tmp_path / "t0.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", f"single:{backend}",
                "--backend-option", f"{backend}.threads=0")
    assert r.returncode == 0, r.stderr
    for cmd in ("run", "inspect"):
        r = provmap(cmd, art)
        assert r.returncode == 0, (cmd, r.stderr)
    assert "'threads': '0'" in r.stdout


def _host_flags():
    from provmap.runtime_module.host import cpu_flags

    return cpu_flags()


@pytest.mark.skipif("avx512f" in _host_flags() or "sse2" not in _host_flags(),
                    reason="needs an x86 host without AVX-512")
def test_native_code_for_a_cpu_this_host_is_not_is_refused_not_run(tmp_path):
    """`tvm.mcpu=skylake-avx512` without AVX-512 here compiled, and `run` died with "Illegal
    instruction" (exit 132)."""
    model, art = _small_model(tmp_path / "m.onnx"), tmp_path / "sk.provmap"
    mcpu = ("--backend-option", "tvm.mcpu=sapphirerapids")
    r = provmap("compile", model, "-o", art, "--strategy", "single:tvm", *mcpu)
    one_error(r, "mcpu=sapphirerapids", "avx512f", "tvm.cross=1")
    assert not art.exists()
    r = provmap("compile", model, "-o", art, "--strategy", "single:tvm", *mcpu,
                "--backend-option", "tvm.cross=1")
    assert r.returncode == 0, r.stderr
    for args in (("run", art), ("profile", art), ("compare", art, "--model", model)):
        one_error(provmap(*args), "mcpu=sapphirerapids", "avx512f", "this CPU lacks")
    assert provmap("inspect", art).returncode == 0  # reading it runs no native code


def test_the_cost_cache_as_the_output_is_refused_by_any_name(tmp_path):
    """`compile m.onnx -o col.provmap --cache col.provmap`: the artifact replaced the cache and
    left its -wal/-shm files beside it."""
    model = _small_model(tmp_path / "m.onnx")
    cache = tmp_path / "col.sqlite"
    for out, given in ((tmp_path / "col.provmap", tmp_path / "col.provmap"),  # a new path
                       (tmp_path / "hard.provmap", cache), (tmp_path / "soft.provmap", cache)):
        if given == cache:
            cache.touch()
            (os.link if out.name == "hard.provmap" else os.symlink)(cache, out)
        r = provmap("compile", model, "-o", out, "--cache", given, timeout=60)
        one_error(r, f"-o/--output {out} is this command's --cache file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["col.sqlite", "hard.provmap", "m.onnx",
                                                          "soft.provmap"]
    assert cache.read_bytes() == b""


def test_inspect_sqlite_with_relax_writes_the_file(tmp_path, artifact):
    """`inspect --sqlite X --relax` printed the Relax module, said "X existed: replaced" and
    wrote nothing."""
    out = tmp_path / "x.sqlite"
    out.write_bytes(b"old")
    r = provmap("inspect", artifact, "--sqlite", out, "--relax")
    assert r.returncode == 0, r.stderr
    assert "R.function" in r.stdout or "relax" in r.stdout
    assert out.read_bytes()[:16] == b"SQLite format 3\0"


def test_missing_parent_directories_are_refused_not_created(tmp_path, artifact):
    """`map -o`, `overlays -o` and PROVMAP_TRUST naming a directory that does not exist: one
    line, nothing created (overlays and the trust list used to create the directories)."""
    gone = tmp_path / "nonexist"
    one_error(provmap("map", "bundled:squeezenet", "-o", gone / "m"),
              f"directory {gone} does not exist")
    one_error(provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o",
                      gone / "sub" / "ov"), f"directory {gone / 'sub'} does not exist")
    env = {**os.environ, "PROVMAP_TRUST": str(gone / "t.sqlite")}
    model = _small_model(tmp_path / "m.onnx")
    one_error(provmap("compile", model, "-o", tmp_path / "t.provmap", "--strategy",
                      "single:tvm", env=env), f"PROVMAP_TRUST={gone / 't.sqlite'}",
              f"directory {gone} does not exist")
    one_error(provmap("trust", artifact, env=env), "PROVMAP_TRUST=", "does not exist")
    assert not gone.exists() and not (tmp_path / "t.provmap").exists()


def test_choice_options_are_stored_in_their_canonical_spelling(tmp_path):
    """The up-front check was case-insensitive, the backend exact: `openvino.precision=F32`
    was refused late, `onnxruntime.optimization=ALL` stored as given."""
    model, art = _small_model(tmp_path / "m.onnx"), tmp_path / "e.provmap"
    for backend, option, stored in (("openvino", "precision=F32", "'precision': 'f32'"),
                                    ("onnxruntime", "optimization=ALL", "'optimization': 'all'")):
        r = provmap("compile", model, "-o", art, "--strategy", f"single:{backend}",
                    "--backend-option", f"{backend}.{option}")
        assert r.returncode == 0, r.stderr
        r = provmap("inspect", art)
        assert r.returncode == 0 and stored in r.stdout, r.stdout


def _past_interpreter_start(pid) -> bool:
    """Whether the process has spent 0.15 s of CPU: Python's own start-up (site, whose
    KeyboardInterrupt is Python's fatal error, not provmap's) takes a fraction of that, so it
    is then in provmap's imports, whatever the load of the machine."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") >= 0.15


def _interrupt_after(delay, *args):
    """Start `provmap ARGS`, wait until it is past Python's start-up and `delay` seconds more,
    then send SIGINT; exit status and stderr."""
    import signal
    import time

    p = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    if delay == "build":  # when the build starts: a fixed delay there outlasted a warm compile
        for line in p.stderr:  # (CI, 2026-11-27: the signal came after exit 0)
            seen += line
            if "building p0" in line:
                break
    else:
        while p.poll() is None and not _past_interpreter_start(p.pid):
            time.sleep(0.005)
        time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    return p.returncode, seen + err


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8, 1.5, "build"])
def test_ctrl_c_at_start_up_is_one_line(tmp_path, delay):
    """Ctrl-C during the imports printed a 5-line "Exception ignored" block (a KeyboardInterrupt
    Python could not raise inside a weakref callback)."""
    rc, err = _interrupt_after(delay, "compile", "bundled:squeezenet", "-o",
                               tmp_path / "x.provmap", "--strategy", "single:tvm")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert rc == 130 and err.strip().splitlines()[-1] == "provmap: interrupted", (rc, err)
    assert not (tmp_path / "x.provmap").exists()


def test_ctrl_c_inside_a_weakref_callback_is_not_an_exception_ignored_block():
    """The mechanism behind the 5-line block: a KeyboardInterrupt the signal handler raises
    while Python runs a weakref callback cannot propagate; with the CLI's handler installed it
    is recorded (the command stops at its next check) and not printed."""
    code = """if True:
        import os, signal, weakref
        from provmap.provenance.util import interrupt
        interrupt.install()
        class A: pass
        def callback(_):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(10000))  # the handler runs here, inside the callback
        a = A(); r = weakref.ref(a, callback); del a
        print(interrupt.interrupted())
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "True", (r.stdout, r.stderr)
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_annotate_never_writes_over_the_model_the_artifact_came_from(tmp_path):
    """`annotate ART -o <the user's model>` replaced the model the manifest records."""
    model, art = _small_model(tmp_path / "m.onnx"), tmp_path / "emb.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime", "--embed-model")
    assert r.returncode == 0, r.stderr
    before = model.read_bytes()
    one_error(provmap("annotate", art, "-o", model), f"-o/--output {model} is the model this "
              "artifact was compiled from")
    assert model.read_bytes() == before
    r = provmap("annotate", art, "-o", tmp_path / "annotated.onnx")
    assert r.returncode == 0, r.stderr


def _chain_model(path):
    """Relu -> Reshape (its shape from a Shape -> Gather -> Unsqueeze -> Concat chain, folded
    before import) -> MatMul -> Identity -> Sigmoid: 9 nodes, 4 that compute."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "m1"),
             numpy_helper.from_array(np.random.RandomState(0).rand(4, 6).astype(np.float32), "w")]
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"], name="relu"), n("Shape", ["r"], ["s"], name="shape"),
             n("Gather", ["s", "zero"], ["g"], name="gather", axis=0),
             n("Unsqueeze", ["g", "axes"], ["u"], name="unsqueeze"),
             n("Concat", ["u", "m1"], ["c"], name="concat", axis=0),
             n("Reshape", ["r", "c"], ["rs"], name="reshape"),
             n("MatMul", ["rs", "w"], ["mm"], name="matmul"),
             n("Identity", ["mm"], ["id"], name="identity"),
             n("Sigmoid", ["id"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
                          initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_node_counts_agree_across_compile_inspect_annotate_and_lookup(tmp_path):
    """On a folded Shape chain plus an Identity, coverage said every node mapped while the node
    states said 3 ran, 7 folded, 1 elided; partition counts included the elided Identity; and
    lookup named p0 for the Identity whose value a kernel of p1 carries."""
    import json

    model, art = _chain_model(tmp_path / "chain.onnx"), tmp_path / "ch.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:onnxruntime,tvm",
                "--backend-option", "onnxruntime.exclude_ops=Sigmoid", "--json")
    assert r.returncode == 0, r.stderr
    built = json.loads(r.stdout)
    info = json.loads(provmap("inspect", art, "--model", model, "--json").stdout)
    states = info["placement"]["states"]
    assert states["ran"] == 4 and states["folded_before_import"] == 4 and states["elided"] == 1
    assert sum(states.values()) == 9
    for cov in (built["coverage"], info["coverage"]):
        assert cov["onnx_nodes_mapped"] == states["ran"]
        assert cov["onnx_nodes_elided"] == 9 - states["ran"]
    rows = {row["name"]: row for row in info["placement"]["nodes"]}
    per_partition = {p["id"]: sum(1 for row in rows.values() if p["id"] in row["partitions"])
                     for p in info["partitions"]}
    assert {p["id"]: p["op_nodes"] for p in built["partitions"]} == per_partition
    assert {p["id"]: sum(1 for n in p["onnx_nodes"] if not n["helper"] and n["ran"])
            for p in info["partitions"]} == per_partition == {"p0": 3, "p1": 1}
    r = provmap("annotate", art, "--model", model, "-o", tmp_path / "a.onnx", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["states"] == states
    for name, row in rows.items():
        answer = json.loads(provmap("lookup", art, "--onnx-node", name, "--json").stdout)
        found = answer["results"][0] if "results" in answer else answer
        assert found["partitions"] == row["partitions"], (name, found, row)
    assert rows["identity"]["state"] == "elided" and rows["identity"]["partitions"] == []
    p1 = next(p for p in info["partitions"] if p["id"] == "p1")
    assert [k.split(":", 1)[1] for k in p1["kernels"]] == ["tir_sigmoid"]  # not p0's work again


def test_repeated_single_valued_options_and_empty_backends_are_refused(tmp_path, artifact):
    """`-o a -o b` kept the last value without a word; `--backends ""` searched the default
    backends."""
    one_error = _usage_error
    one_error(provmap("run", artifact, "-o", tmp_path / "a.npz", "-o", tmp_path / "b.npz"),
              "-o/--output: given twice")
    one_error(provmap("run", artifact, "--repeats", "2", "--repeats=3"), "--repeats: given twice")
    for value in ("", "onnxruntime,,tvm"):
        one_error(provmap("compile", "m.onnx", "-o", tmp_path / "x.provmap", "--backends", value),
                  "--backends", "comma-separated list of backends")
    assert not list(tmp_path.iterdir())
    help_text = provmap("compile", "--help").stdout
    assert "precision=bf16" not in help_text  # refused on hosts without bf16


def _usage_error(r, *words):
    """argparse's refusals: one `provmap COMMAND: error:` line, exit 2, no traceback."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error:" in lines[0], r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)


def test_overlays_over_an_existing_directory_says_so(tmp_path, artifact):
    out = tmp_path / "ov"
    r = provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o", out)
    assert r.returncode == 0 and "existed: replaced" not in r.stderr, r.stderr
    r = provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o", out)
    assert r.returncode == 0, r.stderr        # each file it rewrote is named
    for f in ("model.onnx", "partition.json"):
        assert f"provmap: {out / f} existed: replaced" in r.stderr, r.stderr


def test_a_typo_in_a_name_gets_did_you_mean(tmp_path, artifact):
    """Bundled model, backend (bisect --backend, strategies) and lookup names: a close name is
    suggested in the one error line (issue 36's third afternoon found none for these)."""
    one_error(provmap("compile", "bundled:squeezenat", "-o", tmp_path / "x.provmap"),
              "unknown bundled model 'squeezenat'", "did you mean 'squeezenet'?",
              "expected one of")
    one_error(provmap("bisect", "bundled:squeezenet", "--backend", "openvno", "-o",
                      tmp_path / "repro"), "unknown backend 'openvno'",
              "did you mean 'openvino'?")
    from provmap.runtime_module.module import load

    lk = load(artifact, runnable=False).lookup
    kernel = lk.kernel_names()[0]
    one_error(provmap("lookup", artifact, "--kernel", kernel[:-1]), "no kernel",
              f"did you mean {kernel!r}")
    node = lk.node_ids()[0]
    one_error(provmap("lookup", artifact, "--onnx-node", node[:-1] + "z"),
              "no ONNX node named or with ID", f"{node!r}")
    far = one_error(provmap("lookup", artifact, "--onnx-node", "nothing-like-it"), "no ONNX node")
    assert "did you mean" not in far


def test_a_compile_refused_after_the_import_is_one_line(tmp_path):
    """The "imported ..." progress line is held until the build goes on: a refusal right after
    the import was two lines, the progress first (issue 36)."""
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "x.provmap", "--strategy",
                "single:openvino", "--backend-option", "openvino.only_ops=Relu")
    one_error(r, "is not supported by openvino")
    assert r.stderr.strip().count("\n") == 0, r.stderr
    ok = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "y.provmap", "--strategy",
                 "single:onnxruntime")
    assert ok.returncode == 0 and "provmap: imported squeezenet:" in ok.stderr
