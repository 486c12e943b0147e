"""What a stranger's artifact or inputs file can make provmap spend (issue 52): the declared
inputs bounded in total, not only one by one; an `--inputs` .npz checked from its zip directory
and array headers before any data is inflated; random inputs drawn in their own dtype; and the
artifact's indexes linear in its size.  Each test goes through the real CLI and failed on the
code before the issue."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
from attack_kit import members, relu_artifact, repack
from cli_runner import provmap, refused

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    """x: float32[4] -> Relu -> y on ONNX Runtime (runs without trust), and its model."""
    return relu_artifact(tmp_path_factory.mktemp("bounds"))  # beside it: relu.onnx


def _peak_mb(args, cwd=None) -> tuple[subprocess.CompletedProcess, float]:
    """`provmap ARGS` in a child; the child's peak RSS (VmHWM) in MB."""
    code = ("import sys\nfrom provmap.cli.main import main\nrc = main(sys.argv[1:])\n"
            "hwm = [ln.split()[1] for ln in open('/proc/self/status') "
            "if ln.startswith('VmHWM:')][0]\nprint('RSS', hwm, file=sys.stderr)\nsys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                       text=True, timeout=600, cwd=cwd)
    rss = [ln for ln in r.stderr.splitlines() if ln.startswith("RSS ")]
    r.stderr = "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("RSS "))
    return r, (int(rss[0].split()[1]) / 1024 if rss else float("nan"))


def _with_inputs(src, dst, extra: list[dict]):
    """The artifact with `extra` inputs added to model.inputs (used by no partition)."""
    manifest, files = members(src)
    manifest["model"]["inputs"] += extra
    return repack(dst, manifest, files)


def _f32(name, n):
    return {"name": name, "dtype": "float32", "shape": [n], "bytes": 4 * n}


# -- declared inputs, in total ------------------------------------------------------------------

def test_declared_inputs_beyond_memory_in_all_are_refused_before_anything_is_drawn(art,
                                                                                   tmp_path):
    """Each of three unused inputs fits in memory, all three do not: refused when the
    manifest is read (every command), never allocated."""
    import os

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n = int(mem * 0.4) // 4
    big = _with_inputs(art, tmp_path / "big.provmap", [_f32(f"u{i}", n) for i in range(3)])
    refused(provmap("inspect", big), "model.inputs", "in all", "memory")
    # only after inspect refused: the old code would have drawn all of them here
    refused(provmap("run", big, "--random"), "model.inputs", "in all", "memory")


def test_random_inputs_are_drawn_in_their_own_dtype(art, tmp_path):
    """`--random` drew float64 and cast: a 512 MB float32 input cost 1.5 GB at the peak."""
    n = 128 << 20  # float32: 512 MiB
    big = _with_inputs(art, tmp_path / "f32.provmap", [_f32("unused", n)])
    r0, base = _peak_mb(["run", art, "--random", "--repeats", "1", "--warmup", "0"])
    assert r0.returncode == 0, r0.stderr
    r, peak = _peak_mb(["run", big, "--random", "--repeats", "1", "--warmup", "0"])
    assert r.returncode == 0, r.stderr
    assert peak - base < 512 + 300, (base, peak)  # a float64 draw first: + 1536


# -- an --inputs .npz: the directory and headers before the data --------------------------------

def _npz_bomb(path, declared_bytes: int, name="x.npy"):
    """An .npz whose deflated member is a float32 array of `declared_bytes` zeros: a few MB
    on disk."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (declared_bytes // 4,)}
    chunk = bytes(16 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open(name, "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, header)
            left = declared_bytes
            while left:
                f.write(chunk[:min(left, len(chunk))])
                left -= min(left, len(chunk))
    return path


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    return _npz_bomb(tmp_path_factory.mktemp("npz") / "bomb.npz", 1 << 30)


@pytest.mark.parametrize("command", ["run", "compare", "profile", "bisect"])
def test_an_npz_member_larger_than_its_input_is_refused_before_it_is_read(art, bomb, command,
                                                                          tmp_path):
    """A 1 GiB array deflated to ~1 MB, for a model taking float32[4]: refused from its .npy
    header, so the command never holds the gigabyte (the old reader inflated it first)."""
    model = art.parent / "relu.onnx"
    good = tmp_path / "good.npz"
    np.savez(good, x=np.zeros(4, np.float32))
    args = {"run": ["run", art], "compare": ["compare", art, "--model", model],
            "profile": ["profile", art, "--repeats", "1"],
            "bisect": ["bisect", model, "--backend", "openvino"]}[command]
    r0, base = _peak_mb([*args, "--inputs", good])
    assert r0.returncode in (0, 1), r0.stderr  # compare/bisect: 1 would be a divergence
    r, peak = _peak_mb([*args, "--inputs", bomb])
    assert peak - base < 200, (base, peak)
    line = refused(r, str(bomb), "'x'", "float32[4]")
    assert "float32[268435456]" in line


def test_an_npz_whose_directory_and_header_disagree_is_refused(art, tmp_path):
    """The zip directory bounds what is read, the header what is allocated: they must agree."""
    bad = tmp_path / "bad.npz"
    head = bytearray()

    class _W:
        def write(self, b):
            head.extend(b)

    np.lib.format.write_array_header_1_0(_W(), {"descr": "<f4", "fortran_order": False,
                                                "shape": (4,)})
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("x.npy", bytes(head) + bytes(16 + 4096))
    refused(provmap("run", art, "--inputs", bad), str(bad), "'x.npy'", "zip directory")
    with zipfile.ZipFile(bad, "w") as z:  # an honest file still runs
        z.writestr("x.npy", bytes(head) + bytes(16))
    r = provmap("run", art, "--inputs", bad)
    assert r.returncode == 0, r.stderr


# -- the artifact's indexes ---------------------------------------------------------------------

def test_inspect_of_100000_partitions_is_linear(art, tmp_path):
    """`Artifact.partition()` scanned the list for each partition: 20,000 empty partitions took
    21 s in inspect, 80,000 did not finish in 300 s.  A hundred thousand read in seconds (the
    bound is generous: the machine is shared)."""
    manifest, files = members(art)
    p0 = manifest["partitions"][0]
    n = 100_000
    for i in range(1, n):  # no members of their own: the zip directory holds 50,000 at most
        manifest["partitions"].append({
            "id": f"e{i}", "backend": p0["backend"], "type_key": p0["type_key"], "ops": [],
            "onnx_nodes": [], "inputs": [], "outputs": [], "files": {},
            "source": p0["source"], "kernels": []})
    many = repack(tmp_path / "many.provmap", manifest, files)
    t0 = time.perf_counter()
    r = provmap("inspect", many, timeout=180)  # the old code: 80,000 ran past 300 s
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    assert f"{n} partition(s)" in r.stdout.splitlines()[0], r.stdout[:300]
    assert sum(ln.startswith("e") for ln in r.stdout.splitlines()) == n - 1
    assert took < 60, took
    # the manifest check's duplicate-id test is an index too, and still refuses
    manifest["partitions"][-1]["id"] = "e1"
    refused(provmap("inspect", repack(tmp_path / "dup.provmap", manifest, files), timeout=180),
            f"partitions[{n - 1}].id", "e1 is used by two partitions")
