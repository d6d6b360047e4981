"""The partitions' API Priority and Fairness samples as the proxy's /metrics carries them."""

from __future__ import annotations

from proxy.flowcontrol_metrics import flowcontrol_families

EXPOSITION = b"""# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 12
# HELP apiserver_flowcontrol_nominal_limit_seats [BETA] Nominal number of execution seats configured for each priority level
# TYPE apiserver_flowcontrol_nominal_limit_seats gauge
apiserver_flowcontrol_nominal_limit_seats{priority_level="catch-all"} 13
apiserver_flowcontrol_nominal_limit_seats{priority_level="e2e-pl"} 7
# HELP apiserver_flowcontrol_request_concurrency_limit x
# TYPE apiserver_flowcontrol_request_concurrency_limit gauge
apiserver_flowcontrol_request_concurrency_limit 3
# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 400
"""


def test_only_the_flowcontrol_families_are_kept_each_sample_labelled_with_its_partition() -> None:
    families = flowcontrol_families(EXPOSITION, "tp2")

    assert list(families) == [b"apiserver_flowcontrol_nominal_limit_seats", b"apiserver_flowcontrol_request_concurrency_limit"]
    assert families[b"apiserver_flowcontrol_nominal_limit_seats"][2:] == [
        b'apiserver_flowcontrol_nominal_limit_seats{partition="tp2",priority_level="catch-all"} 13',
        b'apiserver_flowcontrol_nominal_limit_seats{partition="tp2",priority_level="e2e-pl"} 7',
    ]
    assert families[b"apiserver_flowcontrol_request_concurrency_limit"][0].startswith(b"# HELP ")
    assert families[b"apiserver_flowcontrol_request_concurrency_limit"][2] == (
        b'apiserver_flowcontrol_request_concurrency_limit{partition="tp2"} 3')
