"""Chaos profiles: the built-in ones, files that extend them, and errors that name the key."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from local.chaos.profiles import (
    CONSUMERS,
    PROFILE_NAMES,
    Latency,
    ProfileError,
    load_profile,
    profile_from_dict,
    rng_for,
)


def test_the_none_profile_injects_nothing():
    profile = load_profile("none")
    assert not profile.active
    assert not profile.endpoint.active and not profile.workers.active and profile.reshards == ()


def test_the_heavy_profile_has_what_the_issue_names():
    heavy = load_profile("heavy")
    assert heavy.endpoint.put_records_throttle_rate == 0.30
    assert set(heavy.endpoint.request_error_rate.values()) == {0.03}
    assert set(heavy.endpoint.lost_response_rate.values()) == {0.01}
    assert [r.action for r in heavy.reshards] == ["split", "merge"]
    assert 100 <= heavy.workers.kill_every <= 500 and heavy.workers.functions == (CONSUMERS,)


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_every_built_in_profile_survives_the_trip_to_json_and_back(name):
    profile = load_profile(name)
    assert profile_from_dict(json.loads(profile.to_json())) == profile


def test_a_toml_file_extends_a_built_in_profile_and_overrides_only_what_it_says(tmp_path: Path):
    path = tmp_path / "mine.toml"
    path.write_text(
        'extends = "heavy"\nseed = 7\n[endpoint]\nlost_response_rate = { kinesis = 0.02 }\n'
        '[workers]\nkill_every = 50\n[[reshards]]\nat_s = 5\naction = "split"\n'
    )
    profile = load_profile(path)
    heavy = load_profile("heavy")
    assert profile.name == "mine" and profile.seed == 7
    assert profile.endpoint.lost_response_rate == {"kinesis": 0.02, "dynamodb": 0.01, "sqs": 0.01}
    assert profile.endpoint.put_records_throttle_rate == heavy.endpoint.put_records_throttle_rate
    assert profile.workers.kill_every == 50 and profile.workers.oom_every == heavy.workers.oom_every
    assert [(r.at_s, r.action) for r in profile.reshards] == [(5.0, "split")]  # a list replaces


def test_a_json_file_is_read_too(tmp_path: Path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"endpoint": {"sqs_send_error_rate": 0.5}}))
    assert load_profile(path).endpoint.sqs_send_error_rate == 0.5


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"endpoint": {"put_records_throttle_rate": 1.5}}, "endpoint.put_records_throttle_rate"),
        ({"endpoint": {"lost_response_rate": {"lambda": 0.1}}}, "unknown service 'lambda'"),
        ({"workers": {"kil_every": 3}}, "unknown key 'kil_every'"),
        ({"workers": {"kill_every": -1}}, "workers.kill_every"),
        ({"workers": {"functions": "producer"}}, "workers.functions"),
        ({"reshards": [{"at_s": 3, "action": "shuffle"}]}, "reshards[0].action"),
        ({"reshards": [{"action": "split"}]}, "reshards[0]: missing at_s"),
        ({"seed": "seven"}, "seed"),
    ],
)
def test_a_bad_key_or_value_is_refused_naming_it(raw, named):
    with pytest.raises(ProfileError) as error:
        profile_from_dict(raw)
    assert named in str(error.value)


def test_an_unknown_name_or_base_is_refused(tmp_path: Path):
    with pytest.raises(ProfileError, match="not one of none, light, heavy"):
        load_profile("chaotic")
    path = tmp_path / "p.toml"
    path.write_text('extends = "medium"\n')
    with pytest.raises(ProfileError, match="extends 'medium'"):
        load_profile(path)


def test_latency_is_fixed_plus_a_capped_heavy_tail():
    latency = Latency(fixed_ms=2, tail_scale_ms=5, tail_alpha=1.5, max_ms=100)
    rng = random.Random(3)
    samples = sorted(latency.sample_ms(rng) for _ in range(20_000))
    assert samples[0] >= 2 and samples[-1] == 100
    median, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
    assert median < 6 < 20 < p99  # most calls get a few ms; the tail is tens of times longer


def test_a_seed_makes_every_site_reproducible_and_sites_independent():
    profile = profile_from_dict({"seed": 11})
    first, again = rng_for(profile, "kinesis"), rng_for(profile, "kinesis")
    assert [first.random() for _ in range(3)] == [again.random() for _ in range(3)]
    assert rng_for(profile, "kinesis").random() != rng_for(profile, "sqs").random()
