"""Measuring candidates through TVM's RPC tracker (provmap.partition.measure.remote): a tracker and two
servers on 127.0.0.1, each stopped at the end of the test whatever happens."""

from __future__ import annotations

import threading

import pytest

from provmap.partition.measure.cache import CostCache, host_fingerprint
from provmap.partition.collage import CollageOptions, collage
from provmap.partition.measure.remote import RemotePool, TrackerAddress, local_farm
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.registry import get_backend

KEY = "provmap-test"


def rpc_farm(n_servers: int):
    return local_farm(n_servers, KEY)


def _opts(cache, **kw):
    kw.setdefault("e2e_check", False)
    return CollageOptions(max_size=3, max_depth=2, cache_path=str(cache),
                          refine_budget_s=0, in_context=False, **kw)


def _sig(plan):
    return sorted((p.backend, tuple(sorted(p.ops))) for p in plan.partitions)


def _backends():
    return {"onnxruntime": get_backend("onnxruntime"), "openvino": get_backend("openvino")}


def test_parse_address():
    a = TrackerAddress.parse("tracker:10.0.0.5:9190/rasp4")
    assert (a.host, a.port, a.key) == ("10.0.0.5", 9190, "rasp4") and str(a) == \
        "tracker:10.0.0.5:9190/rasp4"
    for bad in ("10.0.0.5:9190/rasp4", "tracker:10.0.0.5/rasp4", "tracker:h:x/k", "tracker:h:1/"):
        with pytest.raises(ProvmapError, match="tracker:HOST:PORT/KEY"):
            TrackerAddress.parse(bad)


def test_no_server_is_one_clear_error():
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host="127.0.0.1", port=19190, port_end=19290, silent=True)
    try:
        with pytest.raises(ProvmapError, match="no free server registered under key"):
            RemotePool(TrackerAddress("127.0.0.1", tracker.port, "nobody"))
    finally:
        tracker.terminate()


def test_remote_search_matches_a_local_search_with_the_same_prices(transformer_view, tmp_path):
    cache = tmp_path / "costs.sqlite"
    with rpc_farm(2) as (addr, _servers):
        res = collage(transformer_view, _backends(), _opts(cache, measure_on=str(addr)))
    rep = res.report
    on = rep.measured_on
    assert on["where"] == str(addr) and on["sessions_opened"] == 2
    assert on["device"]["host"] == host_fingerprint()  # 127.0.0.1 is this machine
    assert set(on["device"]["versions"]) >= {"onnxruntime", "openvino"}
    assert rep.estimator["measured"] > 0
    # The same cache, searched locally: every price it asks for is there (the same keys), so
    # nothing is measured, and the plan is the same.
    local = collage(transformer_view, _backends(), _opts(cache))
    assert local.report.estimator["measured"] == 0
    assert _sig(local.plan) == _sig(res.plan)
    keys = {(e["key"], e["backend"], e["host"]) for e in CostCache(str(cache)).entries()}
    assert all(h == host_fingerprint() for _k, _b, h in keys)


def test_losing_a_server_mid_search_still_completes(transformer_view, tmp_path):
    with rpc_farm(2) as (addr, servers):
        killed = threading.Event()

        def progress(msg):
            if "servers in parallel" in msg and not killed.is_set():
                threading.Timer(1.0, lambda: (servers[0].terminate(), killed.set())).start()

        res = collage(transformer_view, _backends(), _opts(tmp_path / "c.sqlite", e2e_check=True,
                                                      measure_on=str(addr)),
                      progress=progress)
        assert killed.wait(30)
    on = res.report.measured_on
    assert on["sessions_opened"] == 2
    # plans are not run end to end here: that would measure this host, not the device
    assert "skipped" in res.report.e2e_skipped and res.artifact is None
    covered = sorted(i for p in res.plan.partitions for i in p.ops)
    assert covered == sorted(transformer_view.op_nodes)
    # the lost session's in-flight candidate was retried on the other server (or, if the kill
    # fell between two measurements, the session was found dead on its next use)
    assert on["sessions_lost"] >= 1, on
