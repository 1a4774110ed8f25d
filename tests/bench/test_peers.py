from bench.peers import peer_rates, peers_markdown

# Lines as OpenNMT-tf 2.32 logs them (from a run of bench.peers), with other lines around.
LOG = """\
2026-11-23 10:19:01.576000: I training.py:176] Saved checkpoint run/ckpt-1
2026-11-23 10:19:29.010000: I runner.py:310] Step = 20 ; steps/s = 0.70, tokens/s = 4822 \
(2289 source, 2533 target) ; Learning rate = 0.000179 ; Loss = 8.411479
2026-11-23 10:19:56.808000: I runner.py:310] Step = 40 ; steps/s = 0.72, tokens/s = 4969 \
(2358 source, 2611 target) ; Learning rate = 0.000349 ; Loss = 7.122755
2026-11-23 10:20:24.100000: I runner.py:310] Step = 60 ; steps/s = 0.73, tokens/s = 5001 \
(2370 source, 2631 target) ; Learning rate = 0.000520 ; Loss = 6.5
"""


def test_peer_rates_are_the_logged_target_rates_without_the_first_report():
    assert peer_rates(LOG) == [2611.0, 2631.0]
    assert peer_rates("no training lines") == []


def test_the_section_shows_each_round_and_the_ratio_of_the_means():
    ours = [{"tokens_per_second": 6000.0, "reports": 9, "precision": "mixed_bfloat16"}] * 2
    peer = [
        {"tokens_per_second": 3000.0, "reports": 5},
        {"tokens_per_second": 5000.0, "reports": 5},
    ]
    text = peers_markdown(ours, peer, 1.5, 3.0, 400.0)
    assert "| 1 | 6,000 (9 reports, mixed_bfloat16) | 3,000 (5 reports) | 2.00x |" in text
    assert "| **mean** | **6,000** | **4,000** | **1.50x** |" in text
    assert "**meets**" in text
