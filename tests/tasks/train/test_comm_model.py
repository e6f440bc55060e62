"""The communication model: traffic per ZeRO stage, overlap by bucket size, memory per rank, and the choice."""
import pytest

from tasks.train.comm_model import (DEEPSPEED_BUCKET, Cluster, Layout, ModelSize, best, bucket_candidates, comm_bound,
                                    comm_times, memory_gb, predict)

M125 = ModelSize(params=125_000_000, layers=12, dim=768, seq_len=2048)


def cluster(busbw=10.0, overlaps=False, latency=0.0, memory=None, ranks=8):
    return Cluster(ranks=ranks, busbw_gbps=busbw, latency_s=latency, compute_s_per_sample=0.05, overlaps=overlaps,
                   memory_gb=memory)


@pytest.mark.parametrize("stage,g,passes", [(0, 4, 2), (1, 4, 3), (2, 4, 9), (3, 4, 12), (2, 1, 3), (3, 1, 3)])
def test_traffic_per_step_is_deepspeeds(stage, g, passes):
    # 2M for ZeRO-0, 3M for ZeRO-1, (2G+1)M for ZeRO-2 (gradients all-reduced), 3GM for ZeRO-3: (n-1)/n over the bus
    c = cluster()
    total, exposed = comm_times(M125, Layout(stage, 1, g, DEEPSPEED_BUCKET), c, 0.05)
    one_pass = M125.params * 2 * (c.ranks - 1) / c.ranks / 10e9
    assert total == pytest.approx(passes * one_pass)
    assert exposed == pytest.approx(total)  # nothing overlaps without overlap


def test_a_bucket_holding_every_gradient_overlaps_nothing_and_a_cut_one_does():
    c = cluster(busbw=50.0, overlaps=True)
    whole = predict(M125, Layout(2, 4, 1, DEEPSPEED_BUCKET), c)
    cut = predict(M125, Layout(2, 4, 1, M125.params // 8), c)
    assert whole.comm_s == pytest.approx(cut.comm_s)
    gather = whole.comm_s / 3  # ZeRO-2, G=1: an all-reduce (two passes) and an all-gather of the same size
    assert whole.exposed_comm_s == pytest.approx(whole.comm_s)
    # the backward (2/3 of 0.2 s) hides all but the last of 8 buckets of the reduce; the gather stays exposed
    assert cut.exposed_comm_s == pytest.approx(gather + 2 * gather / 8)
    assert cut.step_s < whole.step_s


def test_latency_is_paid_per_bucket():
    c = cluster(latency=1e-3)
    few, many = (comm_times(M125, Layout(1, 1, 1, b), c, 0.05)[0] for b in (DEEPSPEED_BUCKET, 1_000_000))
    assert many - few == pytest.approx((125 - 1) * 2 * 1e-3)  # 125 buckets instead of 1, for reduce and gather


def test_memory_per_rank_falls_with_the_stage():
    layouts = [Layout(s, 1, 1, 10**6) for s in range(4)]
    mem = [memory_gb(M125, layout, 8) for layout in layouts]
    assert mem[0] > mem[1] > mem[2] > mem[3]
    no_activations = ModelSize(M125.params, 0, 0, 0)
    assert memory_gb(no_activations, Layout(0, 1, 1, 1), 8) == pytest.approx((16 * M125.params + 4) / 1e9)
    assert memory_gb(no_activations, Layout(3, 1, 1, 1), 8) == pytest.approx((2 * M125.params + 4) / 1e9)


def test_slow_links_choose_zero_1_and_say_more_nodes_will_not_help():
    slow = cluster(busbw=0.025)  # 200 Mbit/s
    rows = [predict(M125, Layout(s, 4, 4, b), slow) for s in (1, 2, 3) for b in bucket_candidates(M125.params)]
    chosen = best(rows)
    assert chosen.layout.zero_stage == 1 and comm_bound(chosen)
    fast = cluster(busbw=400.0, overlaps=True)
    chosen = best([predict(M125, Layout(s, 4, 4, b), fast) for s in (1, 2, 3) for b in bucket_candidates(M125.params)])
    assert not comm_bound(chosen) and chosen.layout.bucket < M125.params


def test_the_choice_only_takes_layouts_that_fit():
    tight = cluster(memory=1.0)  # ZeRO-0/1 of 125M need 2 GB and more; ZeRO-3 about 0.3 GB plus activations
    rows = [predict(M125, Layout(s, 1, 1, 10**6), tight) for s in (1, 2, 3)]
    assert [r.fits for r in rows] == [False, False, True] and best(rows).layout.zero_stage == 3
    with pytest.raises(ValueError, match="activation_checkpointing"):
        best([predict(M125, Layout(1, 1, 1, 10**6), cluster(memory=0.1))])


def test_bucket_candidates_cut_the_model_and_keep_deepspeeds_default():
    assert bucket_candidates(125_000_000) == [DEEPSPEED_BUCKET, 31_250_000, 15_625_000, 7_812_500]
    assert min(bucket_candidates(2_000_000)) == 1_000_000


@pytest.mark.parametrize("busbw", [0.025, 0.25, 3.0, 50.0])
@pytest.mark.parametrize("overlaps", [True, False])
def test_exposed_communication_is_never_more_than_all_of_it(busbw, overlaps):
    c = cluster(busbw=busbw, overlaps=overlaps, latency=1e-4)
    for stage in range(4):
        for bucket in bucket_candidates(M125.params):
            p = predict(M125, Layout(stage, 4, 4, bucket), c)
            assert 0 <= p.exposed_comm_s <= p.comm_s + 1e-12 and p.step_s >= p.compute_s


def test_gloo_zero3_hides_the_probed_share_of_its_prefetched_gathers_but_never_the_first_bucket():
    # 1 GB/s, 2 ranks: one gather of the model's 250 MB moves 125 MB, 0.125 s; 0.05 s a sample x 4 = 0.2 s compute
    probed = Cluster(ranks=2, busbw_gbps=1.0, latency_s=0.0, compute_s_per_sample=0.05, overlaps=False,
                     gather_hidden=0.5)
    gather = 0.125
    one_bucket = predict(M125, Layout(3, 4, 1, DEEPSPEED_BUCKET), probed)
    assert one_bucket.exposed_comm_s == pytest.approx(3 * gather)  # the first bucket is the whole model
    eight = predict(M125, Layout(3, 4, 1, M125.params // 8), probed)
    hideable = 0.5 * gather * 7 / 8  # the probed share of all but the first bucket, in the forward and the backward
    forward = 0.2 / 3
    assert eight.exposed_comm_s == pytest.approx(3 * gather - min(hideable, forward) - min(hideable, 2 * forward))
    assert eight.comm_s == pytest.approx(3 * gather)  # hidden, not saved
    unprobed = predict(M125, Layout(3, 4, 1, M125.params // 8), cluster(busbw=1.0, ranks=2))
    assert unprobed.exposed_comm_s == pytest.approx(3 * gather)
    reduced = predict(M125, Layout(1, 4, 1, M125.params // 8), probed)  # gloo's gradient reductions run inline
    assert reduced.exposed_comm_s == pytest.approx(reduced.comm_s)


def test_gloo_reductions_hide_the_probed_share_of_all_but_the_last_bucket_once_per_reduction():
    # 1 GB/s, 2 ranks: a reduce of 250 MB moves 2 x 125 MB, 0.25 s; the backward of 0.2 s compute is 0.133 s
    probed = Cluster(ranks=2, busbw_gbps=1.0, latency_s=0.0, compute_s_per_sample=0.05, overlaps=False,
                     reduce_hidden=0.4)
    reduce, gather, backward = 0.25, 0.125, 0.2 * 2 / 3
    whole = predict(M125, Layout(1, 4, 1, DEEPSPEED_BUCKET), probed)
    assert whole.exposed_comm_s == pytest.approx(reduce + gather)  # one bucket: it starts when the backward ends
    cut = predict(M125, Layout(1, 4, 1, M125.params // 8), probed)
    assert cut.exposed_comm_s == pytest.approx(reduce + gather - 0.4 * 7 / 8 * backward)  # the backward is shorter
    zero2 = predict(M125, Layout(2, 4, 4, M125.params // 8), probed)  # reduced every micro-step: hidden every one
    assert zero2.exposed_comm_s == pytest.approx(4 * (reduce - 0.4 * 7 / 8 * backward) + gather)
    unprobed = predict(M125, Layout(1, 4, 1, M125.params // 8), cluster(busbw=1.0, ranks=2))
    assert unprobed.exposed_comm_s == pytest.approx(unprobed.comm_s) and cut.step_s < unprobed.step_s


def test_zero3_pays_its_measured_cost_every_micro_step_and_no_other_stage_does():
    c = Cluster(ranks=2, busbw_gbps=1.0, latency_s=0.0, compute_s_per_sample=0.05, overlaps=False,
                zero3_overhead_s=0.03)
    base = Cluster(ranks=2, busbw_gbps=1.0, latency_s=0.0, compute_s_per_sample=0.05, overlaps=False)
    for stage, g in ((3, 1), (3, 4), (1, 4), (2, 4)):
        layout = Layout(stage, 4, g, DEEPSPEED_BUCKET)
        extra = predict(M125, layout, c).step_s - predict(M125, layout, base).step_s
        assert extra == pytest.approx(0.03 * g if stage == 3 else 0.0)
