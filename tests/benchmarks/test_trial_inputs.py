"""A few of the trial inputs (benchmarks/trial_inputs.py, make trials), through karpy validate."""

from __future__ import annotations

from benchmarks.trial_inputs import Outcome, Tally, Trial, build, failed, report, run_trials, workspace

PICKED = (
    "a *.yaml link to /dev/zero in a directory",
    "a FIFO in a directory",
    "a symbolic link loop named",
)


def test_special_files_through_validate_are_refused_in_one_line_quickly() -> None:
    with workspace() as root:
        trials = [trial for trial in build(root, ("special",)) if trial.name in PICKED]
        assert sorted(trial.name for trial in trials) == sorted(PICKED)
        tallies = run_trials(trials, ("validate",), jobs=2, progress=lambda _: None)
    tally = tallies[("special", "validate")]
    assert tally.runs == 3
    assert tally.exits == {"2": 3}
    assert not failed(tallies), report(tallies)
    assert tally.peak_rss < 300_000_000


def test_a_traceback_an_accepted_invalid_input_and_silence_are_counted() -> None:
    tally = Tally()
    invalid = Trial("invalid", "a bad pool", ("x.yaml",), invalid=True)
    tally.add(invalid, "validate", Outcome(0, "ok: x", "", 1.0, 50_000_000, 1.0))
    tally.add(invalid, "convert", Outcome(0, "", "", 1.0, 50_000_000, 1.0))  # convert checks nothing
    crash = Outcome(1, "", "Traceback (most recent call last):\n", 1.0, 2_000_000_000, 61.0)
    tally.add(invalid, "simulate", crash)
    assert (tally.runs, tally.accepted_invalid, tally.tracebacks, tally.over_1gb, tally.silent) == (
        3,
        1,
        1,
        1,
        1,
    )
    assert failed({("invalid", "validate"): tally})
