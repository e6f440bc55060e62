"""DeepSpeed's per-node launcher as this project starts it for a job on one node."""


def test_the_local_launcher_looks_at_its_ranks_often_and_keeps_the_rest_of_time(monkeypatch):
    import time

    import tasks.train.local_launcher as local

    slept = []
    monkeypatch.setattr(local.time, "sleep", slept.append)
    clock = local._PollingClock()
    clock.sleep(1)  # DeepSpeed's launcher sleeps a second between looks at its ranks
    clock.sleep(0.05)
    assert slept == [local.POLL_S, 0.05] and local.POLL_S <= 0.1
    assert clock.strftime("%Y", clock.localtime(0)) == time.strftime("%Y", time.localtime(0))
