"""Parallel sweep slots: each gets its own {port} and {gpus} in the server command, health URL and target."""

from servelab.sweep.parallel import for_slot, slot_base, slot_values
from servelab.sweep.runner import ServerSpec, point_config
from servelab.sweep.server import render_command


def test_each_slot_has_its_own_port_and_gpus():
    assert slot_values({}, 0) == {"port": 8000, "gpus": "0", "slot": 0}
    assert slot_values({"port": 9000, "gpus_per_point": 2}, 2) == {"port": 9002, "gpus": "4,5", "slot": 2}


def test_templates_filled_per_slot_and_serial_is_slot_0():
    srv = ServerSpec("vllm serve m --port {port} --gpus {gpus}", "http://127.0.0.1:{port}/health",
                     variables={"port": 9000, "gpus_per_point": 2})
    base = {"target": {"url": "http://127.0.0.1:{port}/v1"}}
    cfg = point_config(slot_base(base, srv, 0), {"concurrency": 4})
    assert cfg.target.url == "http://127.0.0.1:9000/v1"
    c1, s1 = for_slot(cfg, srv, 1, base=base, params={"concurrency": 4})
    assert (c1.target.url, c1.load.concurrency, s1.health_url) == ("http://127.0.0.1:9001/v1", 4,
                                                                   "http://127.0.0.1:9001/health")
    assert render_command(s1.command, s1.variables) == [
        "vllm",
        "serve",
        "m",
        "--port",
        "9001",
        "--gpus",
        "2,3",
    ]
    c0, s0 = for_slot(cfg, srv, None, base=base, params={"concurrency": 4})
    assert c0.target.url == "http://127.0.0.1:9000/v1" and s0.health_url.endswith(":9000/health")
    plain = {"target": {"url": "sim"}}
    assert slot_base(plain, srv, 3) is plain
